// Logging: spdlog set up in one place. Every line carries who wrote it (rank and
// local rank, or the dtrun node) and goes to stderr; the library never writes to stdout.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace rtd::log {

// who: "rank 3/local 1" or "dtrun node 0"; spec: "info" or "store:debug,gloo:info,warn".
// Throws rtd::Error(kConfig) for an unknown level. Safe to call again (re-applies).
void setup(const std::string& who, const std::string& spec);

// The logger of one component ("store", "gloo", "launcher", ...).
std::shared_ptr<spdlog::logger> get(const std::string& component);

}  // namespace rtd::log
