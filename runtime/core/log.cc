// spdlog configuration: one stderr sink shared by all component loggers.
#include "runtime/core/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <map>
#include <mutex>
#include <sstream>

#include "rt_dist/error.h"

namespace rtd::log {
namespace {

struct State {
  std::mutex mu;
  std::shared_ptr<spdlog::sinks::stderr_sink_mt> sink =
      std::make_shared<spdlog::sinks::stderr_sink_mt>();
  std::string pattern = "%Y-%m-%d %H:%M:%S.%e [-] %l %n: %v";
  spdlog::level::level_enum default_level = spdlog::level::info;
  std::map<std::string, spdlog::level::level_enum> levels;
  std::map<std::string, std::shared_ptr<spdlog::logger>> loggers;
};

State& state() {
  static State* s = new State();  // never destroyed: loggers may be used during exit
  return *s;
}

spdlog::level::level_enum parse_level(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  if (level == spdlog::level::off && name != "off") {
    throw Error(ErrorCategory::kConfig, "RTD_LOG: unknown level '" + name +
                                            "' (use trace, debug, info, warn, error or off)");
  }
  return level;
}

void apply(State& s, const std::string& name, spdlog::logger& logger) {
  auto it = s.levels.find(name);
  logger.set_level(it != s.levels.end() ? it->second : s.default_level);
  logger.set_pattern(s.pattern);
}

}  // namespace

void setup(const std::string& who, const std::string& spec) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.levels.clear();
  s.default_level = spdlog::level::info;
  std::stringstream items(spec);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    auto colon = item.find(':');
    if (colon == std::string::npos) {
      s.default_level = parse_level(item);
    } else {
      s.levels[item.substr(0, colon)] = parse_level(item.substr(colon + 1));
    }
  }
  s.pattern = "%Y-%m-%d %H:%M:%S.%e [" + who + "] %l %n: %v";
  for (auto& [name, logger] : s.loggers) apply(s, name, *logger);
}

std::shared_ptr<spdlog::logger> get(const std::string& component) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.loggers.find(component);
  if (it != s.loggers.end()) return it->second;
  auto logger = std::make_shared<spdlog::logger>(component, s.sink);
  apply(s, component, *logger);
  s.loggers.emplace(component, logger);
  return logger;
}

}  // namespace rtd::log
