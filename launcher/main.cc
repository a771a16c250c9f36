// dtrun's entry point: flags, signal handlers, the agent, and the exit code.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/agent.h"
#include "launcher/doctor/bench.h"
#include "launcher/doctor/doctor.h"
#include "launcher/env_help.h"
#include "launcher/machine.h"
#include "launcher/options.h"
#include "launcher/signals.h"
#include "rt_dist/error.h"
#include "runtime/core/config.h"
#include "runtime/core/log.h"

int main(int argc, char** argv) {
  using namespace rtd;
  EnvMap env = read_process_env();
  LauncherConfig env_config;
  try {
    env_config = launcher_config_from_env(env);
    log::setup("dtrun", env_config.log_spec);
  } catch (const Error& e) {
    std::fprintf(stderr, "dtrun: %s\n", e.what());
    return 2;
  }
  // `dtrun --help-env[=json]`: the variables librt_dist and dtrun read.
  if (argc == 2 &&
      (std::string(argv[1]) == "--help-env" || std::string(argv[1]) == "--help-env=json")) {
    const std::string text = std::string(argv[1]) == "--help-env" ? launcher::env_help_text()
                                                                  : launcher::env_help_json();
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  // A worker of `dtrun doctor --bench` (dtrun started itself).
  if (argc > 1 && std::string(argv[1]) == launcher::doctor::kBenchWorkerArg) {
    try {
      return launcher::doctor::run_bench_worker();
    } catch (const Error& e) {
      std::fprintf(stderr, "dtrun doctor --bench: %s\n", e.what());
      return 1;
    }
  }
  // `dtrun doctor [--bench] [job flags] [program]`: the job's flags, checked.
  const bool doctor = argc > 1 && std::string(argv[1]) == "doctor";
  std::vector<const char*> args(argv, argv + argc);
  bool bench = false;
  if (doctor) {
    args.erase(args.begin() + 1);
    auto it = std::find(args.begin(), args.end(), std::string_view("--bench"));
    if (it != args.end()) {
      bench = true;
      args.erase(it);
    }
    argc = static_cast<int>(args.size());
    argv = const_cast<char**>(args.data());
  }
  launcher::ParseResult parsed =
      launcher::parse_options(argc, argv,
                              {.env_token = env_config.token,
                               .env_tls = env_config.tls,
                               .store_max_keys = env_config.store_max_keys,
                               .store_max_mb = env_config.store_max_mb,
                               .require_token = env_config.require_token,
                               .gpus = launcher::visible_gpus(env_config.cuda_visible_devices),
                               .cpus = launcher::usable_cpus(),
                               .slurm = env_config.slurm,
                               .nccl_preset = env_config.nccl_preset,
                               .program_optional = doctor});
  if (!parsed.options) {
    std::fprintf(parsed.exit_code == 0 ? stdout : stderr, "%s\n", parsed.message.c_str());
    return parsed.exit_code;
  }
  try {
    if (doctor) {
      const int found = launcher::doctor::run_doctor(*parsed.options, env);
      if (!bench) return found;
      if (found != 0) {
        std::fprintf(stderr, "dtrun doctor: --bench skipped: mend the errors above first\n");
        return found;
      }
      // The workers are this dtrun, measuring.
      launcher::LaunchOptions o = *parsed.options;
      o.program = std::filesystem::read_symlink("/proc/self/exe").string();
      o.args = {launcher::doctor::kBenchWorkerArg};
      return std::max(found, launcher::run_agent(o, env_config, env));
    }
    return launcher::run_agent(*parsed.options, env_config, env);
  } catch (const Error& e) {
    std::fprintf(stderr, "dtrun: error: %s\n", e.what());
    return 1;
  }
}
