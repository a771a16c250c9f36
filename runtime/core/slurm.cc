// Slurm's hostlist and tasks-per-node formats (as srun exports them).
#include "runtime/core/slurm.h"

#include <cctype>
#include <sstream>

#include "rt_dist/error.h"

namespace rtd::slurm {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& list) {
  throw Error(ErrorCategory::kConfig, "cannot read Slurm's " + what + " '" + list +
                                          "'; set MASTER_ADDR (and MASTER_PORT) instead");
}

int to_int(const std::string& text, const std::string& what, const std::string& list) {
  if (text.empty() || text.size() > 9) bad(what, list);
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) bad(what, list);
  }
  return std::stoi(text);
}

}  // namespace

std::string first_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  std::size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string entry = nodelist.substr(0, end);
  const auto open = entry.find('[');
  if (entry.empty() || depth != 0) bad("node list", nodelist);
  if (open == std::string::npos) return entry;
  const auto close = entry.find(']', open);
  if (close == std::string::npos) bad("node list", nodelist);
  // "gpu[003-010,015]suffix": the range's first number, zero padding kept.
  std::string first = entry.substr(open + 1, close - open - 1);
  first = first.substr(0, first.find_first_of(",-"));
  to_int(first, "node list", nodelist);
  const std::string rest = entry.substr(close + 1);
  return entry.substr(0, open) + first + (rest.empty() ? "" : first_host(rest));
}

int tasks_on_node(const std::string& tasks_per_node, int node) {
  std::stringstream items(tasks_per_node);
  int seen = 0;
  for (std::string item; std::getline(items, item, ',');) {
    int count = 1;
    const auto paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') bad("tasks per node", tasks_per_node);
      count =
          to_int(item.substr(paren + 2, item.size() - paren - 3), "tasks per node", tasks_per_node);
    }
    const int tasks = to_int(item.substr(0, paren), "tasks per node", tasks_per_node);
    if (node < seen + count) return tasks;
    seen += count;
  }
  bad("tasks per node", tasks_per_node);
}

int default_port(int job_id, int step_id) { return 20000 + (job_id % 2000) * 10 + step_id % 10; }

}  // namespace rtd::slurm
