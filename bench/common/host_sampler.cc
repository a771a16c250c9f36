// HostSampler: a CPU-time or wall-clock timer, delivered to the calling
// thread as SIGPROF; the handler copies the interrupted call stack into a
// fixed array (no allocation in the handler).
#include "bench/common/host_sampler.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace rtd::bench {
namespace {

constexpr int kMaxSamples = 200000;
constexpr int kFrames = 24;
// Frames of the handler and the signal trampoline above the interrupted one.
constexpr int kSkipped = 2;

struct Sample {
  int depth;
  void* frames[kFrames];
};

Sample* g_samples = nullptr;
std::atomic<int> g_count{0};
std::atomic<bool> g_on{false};

void on_sigprof(int, siginfo_t*, void*) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  const int i = g_count.load(std::memory_order_relaxed);
  if (i >= kMaxSamples) return;
  void* frames[kFrames + kSkipped];
  const int n = backtrace(frames, kFrames + kSkipped);
  if (n <= kSkipped) return;
  Sample& s = g_samples[i];
  s.depth = n - kSkipped;
  std::memcpy(s.frames, frames + kSkipped, sizeof(void*) * s.depth);
  g_count.store(i + 1, std::memory_order_relaxed);
}

timer_t g_timer;

}  // namespace

HostSampler::HostSampler(std::chrono::microseconds period, Clock clock) {
  if (g_samples) throw std::runtime_error("HostSampler: one at a time");
  g_samples = new Sample[kMaxSamples];
  g_count = 0;
  void* warm[4];
  backtrace(warm, 4);  // loads the unwinder now, not inside the handler
  struct sigaction sa {};
  sa.sa_sigaction = on_sigprof;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGPROF, &sa, nullptr) != 0) throw std::runtime_error("HostSampler: sigaction");
  struct sigevent ev {};
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGPROF;
  ev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
  const clockid_t id = clock == Clock::kWall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
  if (timer_create(id, &ev, &g_timer) != 0) {
    throw std::runtime_error("HostSampler: timer_create");
  }
  struct itimerspec spec {};
  spec.it_interval.tv_nsec = static_cast<long>(period.count()) * 1000;
  spec.it_value = spec.it_interval;
  timer_settime(g_timer, 0, &spec, nullptr);
}

void HostSampler::keep(bool on) { g_on = on; }

HostSampler::~HostSampler() {
  g_on = false;
  if (g_samples) {
    timer_delete(g_timer);
    signal(SIGPROF, SIG_IGN);
    delete[] g_samples;
    g_samples = nullptr;
  }
}

int HostSampler::write(const std::string& path) {
  g_on = false;
  FILE* out = std::fopen(path.c_str(), "w");
  if (!out) throw std::runtime_error("HostSampler: cannot write " + path);
  const int n = g_count.load();
  for (int i = 0; i < n; ++i) {
    const Sample& s = g_samples[i];
    for (int f = 0; f < s.depth; ++f) {
      Dl_info info{};
      const char* module = "?";
      std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(s.frames[f]);
      if (dladdr(s.frames[f], &info) != 0 && info.dli_fname) {
        module = std::strrchr(info.dli_fname, '/') ? std::strrchr(info.dli_fname, '/') + 1
                                                   : info.dli_fname;
        offset -= reinterpret_cast<std::uintptr_t>(info.dli_fbase);
      }
      // Return addresses point after the call: one byte back is inside it.
      std::fprintf(out, "%s%s+0x%zx", f ? " " : "", module,
                   static_cast<size_t>(offset - (f ? 1 : 0)));
    }
    std::fputc('\n', out);
  }
  std::fclose(out);
  return n;
}

}  // namespace rtd::bench
