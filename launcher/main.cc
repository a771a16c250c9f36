// dtrun's entry point: flags, signal handlers, the agent, and the exit code.
#include <cstdio>
#include <string>

#include "launcher/agent.h"
#include "launcher/doctor/doctor.h"
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
  // `dtrun doctor [job flags] [program]`: the job's flags, checked on this node.
  const bool doctor = argc > 1 && std::string(argv[1]) == "doctor";
  if (doctor) {
    --argc;
    ++argv;
  }
  launcher::ParseResult parsed =
      launcher::parse_options(argc, argv,
                              {.env_token = env_config.token,
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
    if (doctor) return launcher::doctor::run_doctor(*parsed.options, env);
    return launcher::run_agent(*parsed.options, env_config, env);
  } catch (const Error& e) {
    std::fprintf(stderr, "dtrun: error: %s\n", e.what());
    return 1;
  }
}
