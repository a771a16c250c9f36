// HostSampler: where the benchmark's own thread spends its host time, for
// machines with no perf. While one is alive, SIGPROF interrupts the process
// every `period` of CPU time and the handler, when it lands on the thread
// that made the sampler, keeps that thread's call stack (return addresses).
// Linux checks a CPU-time timer only at its scheduler tick: whatever the
// period, expect at most about 250 samples a second of busy thread (290 in
// 1.1 s of all_reduces on an H200 host). Clock::kWall samples by elapsed time
// at the full rate instead, a thread that waits included (its samples then
// show where it waited; a wait the signal cuts short is restarted).
// write() prints each sample as "module+offset" frames, leaf first, one
// sample a line, for addr2line to name offline against unstripped copies:
//   bench/host_profile.py SAMPLES LIBDIR...
// Benchmark code only: it takes the process's SIGPROF for its lifetime.
#pragma once

#include <chrono>
#include <string>

namespace rtd::bench {

class HostSampler {
 public:
  enum class Clock { kThreadCpu, kWall };
  // Starts off (keep(true) to take samples).
  explicit HostSampler(std::chrono::microseconds period = std::chrono::microseconds(200),
                       Clock clock = Clock::kThreadCpu);
  ~HostSampler();  // stops sampling
  HostSampler(const HostSampler&) = delete;
  HostSampler& operator=(const HostSampler&) = delete;

  // Keeps samples only while on (the timer runs regardless).
  void keep(bool on);
  // Stops sampling and writes the samples to path; returns how many.
  int write(const std::string& path);
};

}  // namespace rtd::bench
