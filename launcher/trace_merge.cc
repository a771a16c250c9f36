// Merging the ranks' trace files (trace_merge.h). Each rank's file holds one
// event per line between its first line ({"traceEvents":[) and its last two
// (],"otherData":...}); the merge copies the event lines.
#include "launcher/trace_merge.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "rt_dist/error.h"

namespace rtd::launcher {

void prepare_trace_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  auto fail = [&](const std::string& why) {
    throw Error(ErrorCategory::kConfig, "RTD_TRACE_DIR=" + dir + ": " + why +
                                            "; set it to a directory dtrun and the workers can "
                                            "write (on every node), or unset it");
  };
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) {
    fail(fs::exists(dir) ? "a file, not a directory"
                         : "cannot make it (" + (ec ? ec.message() : std::string("?")) + ")");
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    fail(std::string("not writable (") + std::strerror(errno) + ")");
}

namespace {

// The value of "key": in a rank file's last line ({..."otherData":{...}}).
std::string field(const std::string& line, const std::string& key) {
  const std::string quoted = "\"" + key + "\":";
  const std::size_t at = line.find(quoted);
  if (at == std::string::npos) return "";
  std::size_t from = at + quoted.size(), to = from;
  if (from < line.size() && line[from] == '"') {
    to = line.find('"', ++from);
  } else {
    while (to < line.size() && line[to] != ',' && line[to] != '}') ++to;
  }
  return to == std::string::npos ? "" : line.substr(from, to - from);
}

}  // namespace

MergedTrace merge_traces(const std::string& dir, const TraceRun& run) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank_", 0) == 0 && entry.path().extension() == ".json")
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  MergedTrace merged;
  std::vector<std::string> events;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    if (lines.size() < 3 || lines.front() != "{\"traceEvents\":[")
      throw Error(ErrorCategory::kConfig,
                  "trace file " + f.string() + " is not a rank's trace (or was cut short)");
    const std::string& other = lines.back();
    if (field(other, "run") != run.run || field(other, "restart") != std::to_string(run.restart) ||
        field(other, "world") != std::to_string(run.world)) {
      ++merged.skipped;
      continue;
    }
    ++merged.ranks;
    for (std::size_t i = 1; i < lines.size() && !lines[i].empty() && lines[i][0] != ']'; ++i) {
      std::string event = lines[i];
      if (!event.empty() && event.back() == ',') event.pop_back();
      events.push_back(std::move(event));
    }
  }
  if (merged.ranks == 0) return merged;
  const fs::path out_path = fs::path(dir) / "trace.json";
  std::ofstream out(out_path.string() + ".tmp");
  if (!out) throw Error(ErrorCategory::kConfig, "cannot write " + out_path.string() + ".tmp");
  out << "{\"traceEvents\":[";
  for (std::size_t i = 0; i < events.size(); ++i) out << (i == 0 ? "\n" : ",\n") << events[i];
  out << "\n],\"displayTimeUnit\":\"ms\"}\n";
  out.close();
  if (!out) throw Error(ErrorCategory::kConfig, "cannot write " + out_path.string());
  fs::rename(out_path.string() + ".tmp", out_path);
  return merged;
}

}  // namespace rtd::launcher
