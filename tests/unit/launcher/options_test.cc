#include "launcher/options.h"

#include <gtest/gtest.h>

#include <vector>

namespace rtd::launcher {
namespace {

ParseResult parse(std::vector<const char*> args, const std::string& env_token = "") {
  args.insert(args.begin(), "dtrun");
  return parse_options(static_cast<int>(args.size()), args.data(), env_token);
}

void expect_error(std::vector<const char*> args, const std::string& needle) {
  ParseResult r = parse(args);
  EXPECT_FALSE(r.options.has_value());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.message.find(needle), std::string::npos) << r.message;
}

TEST(Options, TorchrunNamesAndProgramArguments) {
  ParseResult r =
      parse({"--nproc-per-node=4", "--nnodes", "2", "--node-rank=1", "--rdzv=10.0.0.1:29501",
             "--rdzv-timeout=30", "--max-restarts=0", "--env", "A=1", "--env", "B=x=y", "--token=t",
             "./train", "--steps", "5", "--nnodes=9"});
  ASSERT_TRUE(r.options.has_value()) << r.message;
  const LaunchOptions& o = *r.options;
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.rdzv_host, "10.0.0.1");
  EXPECT_EQ(o.rdzv_port, 29501);
  EXPECT_EQ(o.rdzv_timeout, std::chrono::seconds(30));
  ASSERT_EQ(o.env.size(), 2u);
  EXPECT_EQ(o.env[1].first, "B");
  EXPECT_EQ(o.env[1].second, "x=y");
  EXPECT_EQ(o.program, "./train");
  EXPECT_EQ(o.args, (std::vector<std::string>{"--steps", "5", "--nnodes=9"}))
      << "flags after the program belong to the program";
}

TEST(Options, DoubleDashEndsDtrunsFlags) {
  ParseResult r = parse({"--nproc-per-node", "2", "--", "--weird-program-name", "x"});
  ASSERT_TRUE(r.options.has_value()) << r.message;
  EXPECT_EQ(r.options->program, "--weird-program-name");
  EXPECT_EQ(r.options->args, (std::vector<std::string>{"x"}));
}

TEST(Options, UnderscoreAliasesAndEndpointAlias) {
  ParseResult r = parse({"--nproc_per_node", "2", "--rdzv-endpoint", "[::1]:29500", "prog"});
  ASSERT_TRUE(r.options.has_value()) << r.message;
  EXPECT_EQ(r.options->nproc_per_node, 2);
  EXPECT_EQ(r.options->rdzv_host, "::1");
}

TEST(Options, SingleNodeGetsAGeneratedToken) {
  ParseResult r = parse({"prog"});
  ASSERT_TRUE(r.options.has_value());
  EXPECT_EQ(r.options->token.size(), 32u);
  EXPECT_EQ(r.options->rdzv_port, 0) << "single node: any free port";
  ParseResult from_env = parse({"prog"}, "envtoken");
  EXPECT_EQ(from_env.options->token, "envtoken");
}

TEST(Options, HelpExitsZeroWithExamples) {
  ParseResult r = parse({"--help"});
  EXPECT_FALSE(r.options.has_value());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.message.find("--nproc-per-node"), std::string::npos);
  EXPECT_NE(r.message.find("Examples"), std::string::npos);
}

TEST(Options, MalformedInputNamesTheProblem) {
  expect_error({"--nproc-per-node=abc", "prog"}, "--nproc-per-node");
  expect_error({"--nproc-per-node=0", "prog"}, "--nproc-per-node");
  expect_error({"--bogus", "prog"}, "--bogus");
  expect_error({}, "no program given");
  expect_error({"--rdzv=nohostport", "prog"}, "must be host:port");
  expect_error({"--rdzv=h:99999", "prog"}, "port must be in 1..65535");
  expect_error({"--rdzv=h:12ab", "prog"}, "is not a number");
  expect_error({"--env", "NOEQUALS", "prog"}, "must be KEY=VALUE");
  expect_error({"--nnodes=2", "prog"}, "needs --rdzv");
  expect_error({"--nnodes=2", "--rdzv=h:1", "prog"}, "needs a job token");
  expect_error({"--nnodes=2", "--node-rank=2", "--rdzv=h:1", "--token=t", "prog"},
               "must be less than --nnodes=2");
}

}  // namespace
}  // namespace rtd::launcher
