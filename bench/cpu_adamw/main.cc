// cpu_adamw_bench: the host AdamW's bandwidth against a STREAM-like copy and
// triad on the same machine, over 1..N threads, for each vector kernel the CPU
// runs (AVX2, AVX-512). Prints a table (and JSON with --json FILE); asserts
// nothing.
//   cpu_adamw_bench [--elements 64M] [--threads 1,2,4] [--reps 5] [--json FILE] [--units U]
// --units U: also the elements as U units stepped one call each, as the
// offloaded optimizer does, on a kept team against threads started per call.
// AdamW's bytes per element: reads fp32 param, m, v and a bf16 gradient (14),
// writes fp32 param, m, v and a bf16 output (14): 28.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sharding/cpu_adamw.h"
#include "sharding/thread_team.h"

namespace {

using Clock = std::chrono::steady_clock;

std::size_t parse_count(const std::string& s) {
  std::size_t mult = 1;
  std::string digits = s;
  if (!s.empty() && (s.back() == 'M' || s.back() == 'K')) {
    mult = s.back() == 'M' ? (1u << 20) : (1u << 10);
    digits.pop_back();
  }
  return std::stoull(digits) * mult;
}

// Runs body(begin, end) over n elements split across `threads` threads.
template <typename Body>
void split(std::size_t n, int threads, Body body) {
  std::vector<std::thread> helpers;
  const std::size_t step = (n + threads - 1) / threads;
  for (int t = 1; t < threads; ++t)
    helpers.emplace_back(body, std::min(n, t * step), std::min(n, (t + 1) * step));
  body(0, std::min(n, step));
  for (auto& h : helpers) h.join();
}

// n values of T, 2 MiB aligned, each set to x.
template <typename T>
class Aligned {
 public:
  Aligned(std::size_t n, T x)
      : data_(static_cast<T*>(
            std::aligned_alloc(kAlign, (n * sizeof(T) + kAlign - 1) / kAlign * kAlign))) {
    std::fill(data_, data_ + n, x);
  }
  ~Aligned() { std::free(data_); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  T* data() const { return data_; }
  T& operator[](std::size_t i) const { return data_[i]; }

 private:
  static constexpr std::size_t kAlign = std::size_t(2) << 20;
  T* data_;
};

template <typename F>
double best_seconds(int reps, F f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 64u << 20;
  std::vector<int> thread_counts;
  int reps = 5, units = 0;
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--elements") {
      n = parse_count(value);
    } else if (flag == "--threads") {
      for (std::size_t at = 0; at < value.size();) {
        std::size_t comma = value.find(',', at);
        thread_counts.push_back(std::stoi(value.substr(at, comma - at)));
        at = comma == std::string::npos ? value.size() : comma + 1;
      }
    } else if (flag == "--units") {
      units = std::stoi(value);
    } else if (flag == "--reps") {
      reps = std::stoi(value);
    } else if (flag == "--json") {
      json = value;
    } else {
      std::fprintf(stderr, "cpu_adamw_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (thread_counts.empty()) {
    for (int t = 1; t <= static_cast<int>(std::thread::hardware_concurrency()); t *= 2)
      thread_counts.push_back(t);
  }
  // The engine's states are 2 MiB aligned (for huge pages), and so are these.
  Aligned<float> p(n, 0.5f), m(n, 0.01f), v(n, 0.001f), a(n, 1.0f), b(n, 2.0f), c(n, 0.0f);
  Aligned<std::uint16_t> g(n, rtd::float_to_bf16(0.25f)), out(n, 0);
  rtd::shard::AdamWShard s;
  s.param = rtd::BufferView{.data = p.data(), .count = n, .dtype = rtd::DType::kFloat32};
  s.grad = rtd::BufferView{.data = g.data(), .count = n, .dtype = rtd::DType::kBFloat16};
  s.m = m.data();
  s.v = v.data();
  s.out = rtd::BufferView{.data = out.data(), .count = n, .dtype = rtd::DType::kBFloat16};
  std::printf(
      "# host AdamW, %zu elements (bf16 gradient and output), best of %d; the engine's "
      "kernel: %s on 1 thread, %s on 16\n",
      n, reps, rtd::shard::cpu::adamw_kernel(1), rtd::shard::cpu::adamw_kernel(16));
  {
    const auto k = rtd::shard::cpu::adamw_constants(s);
    const double scalar = best_seconds(reps, [&] { rtd::shard::cpu::adamw_scalar(s, k, 0, n); });
    std::printf("# the scalar loop on one thread: %.1f GB/s (%.2f ms)\n", 28.0 * n / scalar / 1e9,
                scalar * 1e3);
  }
  using rtd::shard::cpu::Kernel;
  std::vector<Kernel> kernels;
  for (Kernel k : {Kernel::kAvx2, Kernel::kAvx512})
    if (rtd::shard::cpu::can_run(k)) kernels.push_back(k);
  if (kernels.empty()) kernels.push_back(Kernel::kScalar);
  std::printf("%8s %8s %14s %14s %14s %10s\n", "kernel", "threads", "adamw_GB/s", "copy_GB/s",
              "triad_GB/s", "adamw_ms");
  std::string rows;
  for (int t : thread_counts) {
    std::vector<double> adamw;
    for (Kernel k : kernels)
      adamw.push_back(best_seconds(reps, [&] { rtd::shard::cpu::adamw(s, t, k); }));
    const double copy = best_seconds(reps, [&] {
      split(n, t, [&](std::size_t lo, std::size_t hi) {
        std::memcpy(c.data() + lo, a.data() + lo, (hi - lo) * sizeof(float));
      });
    });
    const double triad = best_seconds(reps, [&] {
      split(n, t, [&](std::size_t lo, std::size_t hi) {
        for (std::size_t j = lo; j < hi; ++j) c[j] = a[j] + 3.0f * b[j];
      });
    });
    const double copy_gbs = 8.0 * n / copy / 1e9, triad_gbs = 12.0 * n / triad / 1e9;
    for (std::size_t i = 0; i < kernels.size(); ++i) {
      const char* name = rtd::shard::cpu::to_string(kernels[i]);
      const double adamw_gbs = 28.0 * n / adamw[i] / 1e9;
      std::printf("%8s %8d %14.1f %14.1f %14.1f %10.2f\n", name, t, adamw_gbs, copy_gbs, triad_gbs,
                  adamw[i] * 1e3);
      char row[256];
      std::snprintf(row, sizeof(row),
                    "%s{\"kernel\": \"%s\", \"threads\": %d, \"adamw_gbs\": %.2f, "
                    "\"copy_gbs\": %.2f, \"triad_gbs\": %.2f, \"adamw_ms\": %.3f}",
                    rows.empty() ? "" : ", ", name, t, adamw_gbs, copy_gbs, triad_gbs,
                    adamw[i] * 1e3);
      rows += row;
    }
  }
  if (units > 0) {
    // As the offloaded optimizer steps: the elements as `units` units, one
    // call each, on a team kept across the calls (chunks to whichever thread
    // is free), against threads started per call with equal parts. Mean and
    // best over the reps: a slow core shows in the mean.
    using rtd::shard::cpu::ThreadTeam;
    const int t = thread_counts.back();
    const std::size_t per = n / units / 16 * 16;
    auto unit_of = [&](int u) {
      rtd::shard::AdamWShard x = s;
      x.param.data = p.data() + u * per;
      x.param.count = per;
      x.grad.data = g.data() + u * per;
      x.m = m.data() + u * per;
      x.v = v.data() + u * per;
      x.out.data = out.data() + u * per;
      return x;
    };
    auto equal_parts = [&](const rtd::shard::AdamWShard& x) {
      const auto k = rtd::shard::cpu::adamw_constants(x);
      split(per, t, [&](std::size_t lo, std::size_t hi) {
        if (!rtd::shard::cpu::adamw_avx2(x, k, lo, hi)) rtd::shard::cpu::adamw_scalar(x, k, lo, hi);
      });
    };
    ThreadTeam team(t - 1);
    for (const char* how : {"team", "spawned"}) {
      double best = 1e30, sum = 0;
      for (int r = 0; r < reps; ++r) {
        auto t0 = Clock::now();
        for (int u = 0; u < units; ++u) {
          if (how[0] == 't')
            rtd::shard::cpu::adamw(unit_of(u), team, Kernel::kAvx2);
          else
            equal_parts(unit_of(u));
        }
        const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
        best = std::min(best, sec);
        sum += sec;
      }
      std::printf(
          "# %d units of %zu elements, %d threads, avx2, %s: mean %.1f ms (%.1f GB/s), "
          "best %.1f ms\n",
          units, per, t, how, 1e3 * sum / reps, 28.0 * per * units / (sum / reps) / 1e9,
          1e3 * best);
      std::printf("RESULT units=%d threads=%d how=%s mean_ms=%.2f best_ms=%.2f\n", units, t, how,
                  1e3 * sum / reps, 1e3 * best);
    }
  }
  if (!json.empty()) {
    if (FILE* f = std::fopen(json.c_str(), "w")) {
      std::fprintf(f, "{\"elements\": %zu, \"rows\": [%s]}\n", n, rows.c_str());
      std::fclose(f);
    }
  }
  return 0;
}
