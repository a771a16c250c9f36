// MethodChoice: the same choice on every rank from different local timings,
// re-measuring, and overrides by RTD_CE_SITES.
#include "collectives/method_choice.h"

#include <gtest/gtest.h>

#include <vector>

#include "rt_dist/error.h"

namespace rtd {
namespace {

using Sums = MethodChoice::Sums;

// Runs a site's calls on several ranks, each timing the copy engines and the
// kernels as given, with the agreement an all-reduce (sum) over the ranks.
// Returns each rank's method at every call.
std::vector<std::vector<Method>> run(std::vector<MethodChoice>& ranks,
                                     const std::vector<std::pair<double, double>>& ms, int calls) {
  std::vector<std::vector<Method>> used(ranks.size());
  for (int c = 0; c < calls; ++c) {
    std::vector<MethodChoice::Step> steps;
    for (auto& r : ranks) steps.push_back(r.next());
    if (steps[0].agree) {
      Sums all{0, 0, 0, 0};
      for (auto& r : ranks) {
        const Sums s = r.local();
        for (int i = 0; i < 4; ++i) all[i] += s[i];
      }
      for (auto& r : ranks) r.decide(all, nullptr);
    }
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      EXPECT_EQ(steps[r].agree, steps[0].agree) << "rank " << r << " call " << c;
      const Method m = steps[r].agree ? ranks[r].current() : steps[r].method;
      if (steps[r].timed >= 0) {
        ranks[r].timed(steps[r].timed, m == Method::kCopyEngines ? ms[r].first : ms[r].second);
      }
      used[r].push_back(m);
    }
  }
  return used;
}

TEST(MethodChoice, RanksThatMeasureDifferentlyChooseAlike) {
  // Rank 0 finds the copy engines faster (1.0 against 2.0 ms), rank 1 slower
  // (3.0 against 1.2): summed, kernels win (3.2 against 4.0) on both.
  std::vector<MethodChoice> ranks(2, MethodChoice(SiteRule::kMeasure, {}));
  auto used = run(ranks, {{1.0, 2.0}, {3.0, 1.2}}, 20);
  EXPECT_EQ(used[0], used[1]);
  EXPECT_EQ(ranks[0].current(), Method::kKernels);
  EXPECT_EQ(ranks[1].current(), Method::kKernels);
  // The trials alternate, copy engines first; the choice holds after them.
  EXPECT_EQ(used[0][0], Method::kCopyEngines);
  EXPECT_EQ(used[0][1], Method::kKernels);
  EXPECT_EQ(used[0].back(), Method::kKernels);
  EXPECT_EQ(ranks[0].decisions(), 1);
}

TEST(MethodChoice, CopyEnginesChosenWhenFasterEverywhere) {
  std::vector<MethodChoice> ranks(3, MethodChoice(SiteRule::kMeasure, {}));
  auto used = run(ranks, {{1.0, 2.0}, {1.1, 2.0}, {0.9, 1.8}}, 12);
  for (const auto& u : used) EXPECT_EQ(u.back(), Method::kCopyEngines);
}

TEST(MethodChoice, CopyEnginesMustWinByTheMargin) {
  // 3% faster is within the 5% margin: the kernels (nccl's own) stay.
  std::vector<MethodChoice> ranks(2, MethodChoice(SiteRule::kMeasure, {}));
  run(ranks, {{0.97, 1.0}, {0.97, 1.0}}, 12);
  EXPECT_EQ(ranks[0].current(), Method::kKernels);
  std::string why;
  MethodChoice c(SiteRule::kMeasure, {});
  c.decide({10.0, 4.0, 6.0, 6.0}, &why);
  EXPECT_EQ(c.current(), Method::kCopyEngines);
  EXPECT_NE(why.find("copy engines 0.667 ms, NCCL kernels 1.667 ms"), std::string::npos) << why;
}

TEST(MethodChoice, MissingTimingsChooseKernels) {
  MethodChoice c(SiteRule::kMeasure, {});
  std::string why;
  EXPECT_EQ(c.decide({5.0, 0.0, 3.0, 0.0}, &why), Method::kKernels);
  EXPECT_NE(why.find("no timings"), std::string::npos);
}

TEST(MethodChoice, FixedRulesNeverMeasure) {
  for (SiteRule rule : {SiteRule::kKernels, SiteRule::kCopyEngines}) {
    MethodChoice c(rule, {});
    for (int i = 0; i < 50; ++i) {
      auto s = c.next();
      EXPECT_FALSE(s.agree);
      EXPECT_EQ(s.timed, -1);
      EXPECT_EQ(s.method, rule == SiteRule::kKernels ? Method::kKernels : Method::kCopyEngines);
    }
    EXPECT_FALSE(c.measuring());
  }
}

TEST(MethodChoice, MeasuresAgainAfterTheRecheckInterval) {
  MethodChoice::Options o;
  o.trials = 2;
  o.recheck = 10;
  std::vector<MethodChoice> ranks(2, MethodChoice(SiteRule::kMeasure, o));
  // 6 trial calls + 1 agreement; 10 calls on the choice; 7 more; 20 on it; 7 more.
  run(ranks, {{1.0, 2.0}, {1.0, 2.0}}, 7 + 10 + 7 + 20 + 7);
  EXPECT_EQ(ranks[0].decisions(), 3);
  EXPECT_EQ(ranks[0].current(), Method::kCopyEngines);
}

TEST(SiteRules, ParsesKindsCountsAndMethods) {
  auto rules = parse_site_rules("*=kernels,all_gather=measure,all_reduce:4096=copy_engines,");
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rule_for(rules, "all_reduce", 4096, SiteRule::kMeasure), SiteRule::kCopyEngines);
  EXPECT_EQ(rule_for(rules, "all_reduce", 8192, SiteRule::kMeasure), SiteRule::kKernels);
  EXPECT_EQ(rule_for(rules, "all_gather", 8192, SiteRule::kKernels), SiteRule::kMeasure);
  EXPECT_EQ(rule_for(rules, "reduce_scatter", 1, SiteRule::kMeasure), SiteRule::kKernels);
  EXPECT_EQ(rule_for({}, "reduce_scatter", 1, SiteRule::kMeasure), SiteRule::kMeasure);
}

TEST(SiteRules, RefusesMalformedEntriesByName) {
  EXPECT_TRUE(parse_site_rules("").empty());
  for (const char* bad : {"all_reduce", "all_reduce=fast", "broadcast=kernels",
                          "all_reduce:0=kernels", "all_reduce:12x=kernels", "*:5=kernels",
                          ",all_gather=kernels", "all_gather=kernels,,*=measure"}) {
    try {
      parse_site_rules(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kConfig);
      EXPECT_NE(std::string(e.what()).find("RTD_CE_SITES"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace rtd
