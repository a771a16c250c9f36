// dtrun's command line from the fuzzer's bytes (arguments separated by
// NUL), with a machine and a Slurm step also drawn from them: parse_options
// answers with options or a message, and never crashes.
#include <string>
#include <vector>

#include "launcher/options.h"
#include "rt_dist/error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rtd;
  using namespace rtd::launcher;
  fuzz::Input in(data, size);
  ParseContext context;
  context.gpus = in.byte() % 9;
  context.cpus = 1 + in.byte() % 64;
  context.env_token = in.chunk();
  context.require_token = in.byte() & 1;
  context.nccl_preset = in.chunk();
  context.program_optional = in.byte() & 1;
  if (in.byte() & 1) {
    SlurmStep s;
    s.nnodes = in.byte() % 5;
    s.ntasks = in.byte() % 5;
    s.node_id = in.byte() % 5;
    s.nodelist = in.chunk();
    s.job_id = static_cast<int>(in.u32());
    s.step_id = static_cast<int>(in.u32());
    context.slurm = s;
  }
  std::vector<std::string> args{"dtrun"};
  std::string current;
  while (!in.done()) {
    const char c = static_cast<char>(in.byte());
    if (c == '\0') {
      args.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) args.push_back(current);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    parse_options(static_cast<int>(argv.size()), argv.data(), context);
  } catch (const Error&) {
  }
  return 0;
}
