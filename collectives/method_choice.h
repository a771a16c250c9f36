// MethodChoice: for one collective site (an operation of one size, dtype and
// reduction: a DDP bucket, an FSDP2 unit's gather or reduction), whether its
// calls go by copy engines or by NCCL's kernels, chosen by timing both in
// this job, alike on every rank.
//
// A measured site alternates the two methods over its first calls (the first
// call of each is a warm-up: set-up, first touches), times the others, and
// at the next call asks every rank for its timings (the caller sums them
// over the ranks: an all-reduce). decide() turns the sums into the choice, so
// every rank that gets the same sums chooses the same, whatever it measured
// itself. Copy engines must beat the kernels by `margin` to be chosen (the
// kernels are what nccl runs: never worse than it by more than the spread).
// After `recheck` calls the site measures again, at twice that interval
// the time after.
//
// What a call's time does not show: a method's cost to the compute running
// beside it (copy engines and kernels contend with it for memory bandwidth,
// kernels for SMs). RTD_CE_SITES overrides the choice per site, per kind or
// for all (parse_site_rules).
//
// No CUDA here: the caller times the calls and runs the agreement.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rtd {

enum class Method { kKernels = 0, kCopyEngines = 1 };
const char* method_name(Method m);

// How a site's method is found: fixed, or measured.
enum class SiteRule { kKernels, kCopyEngines, kMeasure };

// One entry of RTD_CE_SITES: "KIND[:COUNT]=METHOD", KIND all_reduce,
// all_gather, reduce_scatter or * (every kind), COUNT the call's element
// count (absent: every count), METHOD kernels, copy_engines or measure.
struct SiteRuleEntry {
  std::string kind;
  std::size_t count = 0;  // 0: every count
  SiteRule rule = SiteRule::kMeasure;
};
// Comma-separated entries; throws Error (kConfig) naming the bad entry.
std::vector<SiteRuleEntry> parse_site_rules(const std::string& spec);
// The rule for a site: the most specific entry that names it (kind and count
// before kind before *), else `fallback`.
SiteRule rule_for(const std::vector<SiteRuleEntry>& rules, const std::string& kind,
                  std::size_t count, SiteRule fallback);

class MethodChoice {
 public:
  struct Options {
    int trials = 3;             // timed calls of each method (after one warm-up each)
    double margin = 0.05;       // copy engines chosen when faster by at least this fraction
    std::uint64_t recheck = 0;  // calls after a choice before measuring again (0: never)
  };
  // What a site's next call does.
  struct Step {
    Method method = Method::kKernels;
    int timed = -1;      // >= 0: time this call and report it as timed(this index)
    bool agree = false;  // before the call: agree (local() summed over ranks, then decide())
  };
  // The timings one rank brings to an agreement: the sum of its timed calls'
  // milliseconds by method, and their numbers.
  using Sums = std::array<double, 4>;  // kernels ms, copy engines ms, kernels n, copy engines n

  MethodChoice(SiteRule rule, Options options);

  Step next();
  void timed(int index, double ms);
  Sums local() const;
  // The choice from every rank's sums (summed); `why` gets a line for the log.
  Method decide(const Sums& all, std::string* why);
  Method current() const { return current_; }
  bool measuring() const { return rule_ == SiteRule::kMeasure && !decided_; }
  int decisions() const { return decisions_; }
  int timed_calls() const { return 2 * options_.trials; }  // a measurement's, by index

 private:
  SiteRule rule_;
  Options options_;
  Method current_;
  bool decided_ = false;
  int decisions_ = 0;
  std::uint64_t calls_ = 0;  // calls since this measurement began, or since the choice
  std::uint64_t recheck_after_ = 0;
  std::vector<double> ms_;  // by timed index; < 0 while not reported
};

}  // namespace rtd
