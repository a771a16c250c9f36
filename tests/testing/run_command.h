// Runs a shell command line under a time limit and captures stdout+stderr, for
// tests that drive dtrun as a user would. A command that overruns is killed
// (exit code 124), so a hang shows up as a failure, never as a stuck test.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace rtd::testing_util {

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

inline CommandResult run_command(const std::string& command, int limit_s = 60) {
  std::string line = "timeout -k 5 " + std::to_string(limit_s) + " sh -c '" + command + "' 2>&1";
  CommandResult result;
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) result.output.append(buf.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace rtd::testing_util
