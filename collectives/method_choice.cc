#include "collectives/method_choice.h"

#include <charconv>
#include <cstdio>

#include "rt_dist/error.h"

namespace rtd {
namespace {

bool known_kind(const std::string& kind) {
  return kind == "*" || kind == "all_reduce" || kind == "all_gather" || kind == "reduce_scatter";
}

[[noreturn]] void bad_entry(const std::string& entry, const std::string& why) {
  throw Error(ErrorCategory::kConfig,
              "RTD_CE_SITES entry '" + entry + "': " + why +
                  " (write KIND[:COUNT]=METHOD, comma-separated: KIND all_reduce, all_gather, "
                  "reduce_scatter or *, METHOD kernels, copy_engines or measure)");
}

}  // namespace

const char* method_name(Method m) {
  return m == Method::kCopyEngines ? "copy engines" : "NCCL kernels";
}

std::vector<SiteRuleEntry> parse_site_rules(const std::string& spec) {
  std::vector<SiteRuleEntry> rules;
  if (spec.empty()) return rules;
  std::size_t at = 0;
  while (at <= spec.size()) {
    std::size_t comma = spec.find(',', at);
    if (comma == std::string::npos) comma = spec.size();
    const std::string entry = spec.substr(at, comma - at);
    at = comma + 1;
    if (entry.empty()) {
      if (comma == spec.size() && !rules.empty()) break;  // a trailing comma
      bad_entry(entry, "empty");
    }
    const std::size_t eq = entry.find('=');
    if (eq == std::string::npos) bad_entry(entry, "no '='");
    std::string site = entry.substr(0, eq);
    const std::string method = entry.substr(eq + 1);
    SiteRuleEntry e;
    if (const std::size_t colon = site.find(':'); colon != std::string::npos) {
      const std::string count = site.substr(colon + 1);
      auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), e.count);
      if (ec != std::errc() || end != count.data() + count.size() || e.count == 0) {
        bad_entry(entry, "the count '" + count + "' is not a positive integer");
      }
      site.resize(colon);
    }
    if (!known_kind(site)) bad_entry(entry, "unknown kind '" + site + "'");
    if (site == "*" && e.count != 0) bad_entry(entry, "* takes no count");
    if (method == "kernels") {
      e.rule = SiteRule::kKernels;
    } else if (method == "copy_engines") {
      e.rule = SiteRule::kCopyEngines;
    } else if (method == "measure") {
      e.rule = SiteRule::kMeasure;
    } else {
      bad_entry(entry, "unknown method '" + method + "'");
    }
    e.kind = std::move(site);
    rules.push_back(std::move(e));
  }
  return rules;
}

SiteRule rule_for(const std::vector<SiteRuleEntry>& rules, const std::string& kind,
                  std::size_t count, SiteRule fallback) {
  int best = -1;  // 2: kind and count, 1: kind, 0: *
  SiteRule rule = fallback;
  for (const SiteRuleEntry& e : rules) {  // a later entry of the same rank wins
    int rank = -1;
    if (e.kind == kind && e.count == count) rank = 2;
    if (e.kind == kind && e.count == 0) rank = 1;
    if (e.kind == "*") rank = 0;
    if (rank >= best && rank >= 0) {
      best = rank;
      rule = e.rule;
    }
  }
  return rule;
}

MethodChoice::MethodChoice(SiteRule rule, Options options)
    : rule_(rule),
      options_(options),
      current_(rule == SiteRule::kCopyEngines ? Method::kCopyEngines : Method::kKernels),
      recheck_after_(options.recheck) {
  if (options_.trials < 1) options_.trials = 1;
  ms_.assign(2 * options_.trials, -1.0);
}

MethodChoice::Step MethodChoice::next() {
  Step step;
  if (rule_ != SiteRule::kMeasure) {
    step.method = current_;
    return step;
  }
  if (decided_ && recheck_after_ != 0 && calls_ >= recheck_after_) {
    decided_ = false;  // measure again, and next time wait twice as long
    calls_ = 0;
    recheck_after_ *= 2;
    ms_.assign(ms_.size(), -1.0);
  }
  const std::uint64_t k = calls_++;
  if (decided_) {
    step.method = current_;
    return step;
  }
  const std::uint64_t trial_calls = 2 * (static_cast<std::uint64_t>(options_.trials) + 1);
  if (k < trial_calls) {
    // Even calls by copy engines, odd by kernels; the first of each untimed.
    step.method = k % 2 == 0 ? Method::kCopyEngines : Method::kKernels;
    step.timed = k >= 2 ? static_cast<int>(k - 2) : -1;
    return step;
  }
  step.agree = true;  // the caller decides, then runs the call by current()
  step.method = current_;
  return step;
}

void MethodChoice::timed(int index, double ms) {
  if (index >= 0 && static_cast<std::size_t>(index) < ms_.size()) ms_[index] = ms;
}

MethodChoice::Sums MethodChoice::local() const {
  Sums s{0, 0, 0, 0};
  for (std::size_t i = 0; i < ms_.size(); ++i) {
    if (ms_[i] < 0) continue;  // never reported: left out
    const int m = i % 2 == 0 ? 1 : 0;
    s[m] += ms_[i];
    s[2 + m] += 1;
  }
  return s;
}

Method MethodChoice::decide(const Sums& all, std::string* why) {
  decided_ = true;
  calls_ = 0;
  ++decisions_;
  const bool both = all[2] > 0 && all[3] > 0;
  const double kernels = both ? all[0] / all[2] : 0;
  const double engines = both ? all[1] / all[3] : 0;
  current_ =
      both && engines < kernels * (1 - options_.margin) ? Method::kCopyEngines : Method::kKernels;
  if (why != nullptr) {
    char line[160];
    if (both) {
      std::snprintf(line, sizeof(line),
                    "copy engines %.3f ms, NCCL kernels %.3f ms a call (mean over %g and %g "
                    "calls of all ranks): %s",
                    engines, kernels, all[3], all[2], method_name(current_));
    } else {
      std::snprintf(line, sizeof(line), "no timings from a rank: %s", method_name(current_));
    }
    *why = line;
  }
  return current_;
}

}  // namespace rtd
