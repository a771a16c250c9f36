// main() of the collective tests: rtd::init() with the backend this binary was
// built for, or a recorded reason to skip (no GPU).
#include "tests/multiproc/world.h"

#include "collectives/factory.h"
#include "tests/testing/gpu_required.h"

namespace rtd::testing_util {
namespace {
std::shared_ptr<Context> g_ctx;
std::unique_ptr<Memory> g_memory;
std::string g_skip_reason;
}  // namespace

Context* test_context() { return g_ctx.get(); }
Memory& test_memory() { return *g_memory; }
const std::string& skip_reason() { return g_skip_reason; }

}  // namespace rtd::testing_util

int main(int argc, char** argv) {
  using namespace rtd;
  ::testing::InitGoogleTest(&argc, argv);
#ifdef RTD_TEST_CUDA
  std::string why;
  if (usable_gpu_count(&why) == 0) {
    if (testing_util::gpu_required()) return testing_util::no_gpu_exit(why);
    testing_util::g_skip_reason = "GPU test skipped: " + why;
  } else {
    testing_util::g_memory = testing_util::cuda_memory();
  }
  InitOptions options{.backend = Backend::kNccl};
#else
  testing_util::g_memory = testing_util::host_memory();
  InitOptions options{.backend = Backend::kGloo};
#endif
  if (testing_util::g_memory) {
    try {
      testing_util::g_ctx = init(options);
    } catch (const Error& e) {
      std::fprintf(stderr, "init failed: %s\n", e.what());
      return 1;
    }
  } else {
    std::fprintf(stderr, "%s\n", testing_util::g_skip_reason.c_str());
  }
  int rc = RUN_ALL_TESTS();
  testing_util::g_ctx.reset();
  // Every test skipped (no GPU): 77 tells CTest to report the run as skipped, not passed.
  constexpr int kSkipped = 77;
  return rc == 0 && !testing_util::g_memory ? kSkipped : rc;
}
