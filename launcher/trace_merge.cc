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

int merge_traces(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank_", 0) == 0 && entry.path().extension() == ".json")
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) return 0;
  const fs::path out_path = fs::path(dir) / "trace.json";
  std::ofstream out(out_path.string() + ".tmp");
  if (!out) throw Error(ErrorCategory::kConfig, "cannot write " + out_path.string() + ".tmp");
  out << "{\"traceEvents\":[";
  bool first = true;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    if (lines.size() < 3 || lines.front() != "{\"traceEvents\":[")
      throw Error(ErrorCategory::kConfig,
                  "trace file " + f.string() + " is not a rank's trace (or was cut short)");
    for (std::size_t i = 1; i < lines.size() && !lines[i].empty() && lines[i][0] != ']'; ++i) {
      std::string event = lines[i];
      if (!event.empty() && event.back() == ',') event.pop_back();
      out << (first ? "\n" : ",\n") << event;
      first = false;
    }
  }
  out << "\n],\"displayTimeUnit\":\"ms\"}\n";
  out.close();
  if (!out) throw Error(ErrorCategory::kConfig, "cannot write " + out_path.string());
  fs::rename(out_path.string() + ".tmp", out_path);
  return static_cast<int>(files.size());
}

}  // namespace rtd::launcher
