#include "launcher/options.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <vector>

namespace rtd::launcher {
namespace {

ParseResult parse(std::vector<const char*> args, ParseContext context = {}) {
  args.insert(args.begin(), "dtrun");
  return parse_options(static_cast<int>(args.size()), args.data(), context);
}

void expect_error(std::vector<const char*> args, const std::string& needle,
                  ParseContext context = {}) {
  ParseResult r = parse(args, context);
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
  ParseResult from_env = parse({"prog"}, {.env_token = "envtoken"});
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
  expect_error({"--nnodes=2", "--rdzv=h:1", "--require-token", "prog"}, "needs a job token");
  expect_error({"--nnodes=2", "--rdzv=h:1", "prog"}, "needs a job token", {.require_token = true});
  expect_error({"--nnodes=2", "--node-rank=2", "--rdzv=h:1", "--token=t", "prog"},
               "must be less than --nnodes=2");
}

// An empty value (an unset shell variable) is an error naming the flag; the
// next argument never stands in for it.
TEST(Options, EmptyValuesAreErrorsNotTheNextArgument) {
  expect_error({"--token=", "--nnodes=2", "prog"}, "--token= has an empty value");
  expect_error({"--log-dir=", "--nproc-per-node=2", "prog"}, "--log-dir= has an empty value");
  expect_error({"--token", "--nnodes=2", "prog"},
               "--token needs a value but is followed by the flag --nnodes=2");
  expect_error({"--token", "", "--nnodes=2", "prog"}, "--token has an empty value");
  expect_error({"--nproc-per-node", "", "prog"}, "--nproc-per-node has an empty value");
  expect_error({"--env="}, "--env= has an empty value");
}

TEST(Options, NumbersAreCheckedWithMessagesThatSayWhatIsWrong) {
  expect_error({"--nproc-per-node=abc", "prog"}, "--nproc-per-node=abc: not a number");
  expect_error({"--nproc-per-node=0", "prog"}, "--nproc-per-node=0: must be in 1..1024");
  expect_error({"--nnodes=two", "prog"}, "--nnodes=two: not a number");
  expect_error({"--max-restarts=-1", "prog"}, "--max-restarts=-1: must be in 0..1000");
  expect_error({"--heartbeat-timeout=5s", "prog"}, "--heartbeat-timeout=5s: not a number");
  expect_error({"--restart-backoff=abc", "prog"}, "--restart-backoff=abc: not a number");
  expect_error({"--restart-backoff=5:2", "prog"}, "MOST must not be below FIRST");
  expect_error({"--restart-backoff=1:x", "prog"}, "not a number");
  const LaunchOptions o = *parse({"--restart-backoff=2:9", "prog"}).options;
  EXPECT_EQ(o.restart_backoff, std::chrono::seconds(2));
  EXPECT_EQ(o.restart_backoff_max, std::chrono::seconds(9));
}

// TLS: all three files or none, each readable PEM; made absolute for the
// workers; the environment's when no flag is given.
TEST(Options, TlsFilesComeTogetherAndAreChecked) {
  const std::string dir = ::testing::TempDir();
  const std::string pem = dir + "tls_test.pem", junk = dir + "tls_test.txt";
  std::ofstream(pem) << "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  std::ofstream(junk) << "not a certificate\n";
  const std::string cert = "--tls-cert=" + pem, key = "--tls-key=" + pem, ca = "--tls-ca=" + pem;
  const std::string bad_cert = "--tls-cert=" + junk;
  expect_error({cert.c_str(), "prog"}, "missing: --tls-key, --tls-ca");
  expect_error({cert.c_str(), key.c_str(), "--tls-ca=/nonexistent/ca.pem", "prog"},
               "--tls-ca=/nonexistent/ca.pem: cannot read it");
  expect_error({bad_cert.c_str(), key.c_str(), ca.c_str(), "prog"}, "holds no PEM block");
  ParseResult r = parse({cert.c_str(), key.c_str(), ca.c_str(), "prog"});
  ASSERT_TRUE(r.options) << r.message;
  EXPECT_EQ(r.options->tls.ca, pem);
  ParseContext from_env;
  from_env.env_tls = TlsFiles{pem, pem, pem};
  r = parse({"prog"}, from_env);
  ASSERT_TRUE(r.options) << r.message;
  EXPECT_EQ(r.options->tls.cert, pem);
  // Pinned names: with the files, from the flag or the environment; alone, an error.
  r = parse({cert.c_str(), key.c_str(), ca.c_str(), "--tls-peer-names=node,spare", "prog"});
  ASSERT_TRUE(r.options) << r.message;
  EXPECT_EQ(r.options->tls.peer_names, "node,spare");
  from_env.env_tls.peer_names = "node";
  r = parse({"prog"}, from_env);
  ASSERT_TRUE(r.options) << r.message;
  EXPECT_EQ(r.options->tls.peer_names, "node");
  expect_error({"--tls-peer-names=node", "prog"}, "--tls-peer-names pins the names");
  expect_error({cert.c_str(), key.c_str(), ca.c_str(), "--tls-peer-names= , ", "prog"},
               "holds no name");
}

TEST(Options, NprocPerNodeGpuCpuAuto) {
  ParseContext machine{.gpus = 4, .cpus = 16};
  EXPECT_EQ(parse({"--nproc-per-node=gpu", "prog"}, machine).options->nproc_per_node, 4);
  EXPECT_EQ(parse({"--nproc-per-node=cpu", "prog"}, machine).options->nproc_per_node, 16);
  EXPECT_EQ(parse({"--nproc-per-node=auto", "prog"}, machine).options->nproc_per_node, 4);
  ParseContext no_gpu{.gpus = 0, .cpus = 2};
  EXPECT_EQ(parse({"--nproc-per-node=auto", "prog"}, no_gpu).options->nproc_per_node, 2);
  expect_error({"--nproc-per-node=gpu", "prog"}, "no GPU that dtrun can see", no_gpu);
}

// The usage line as typed: several nodes, no token, no node rank.
TEST(Options, SeveralNodesWithoutATokenRunUnauthenticatedAndSaySo) {
  ParseResult r = parse({"--nproc-per-node=4", "--nnodes=2", "--rdzv=master:29500", "./train"});
  ASSERT_TRUE(r.options.has_value()) << r.message;
  EXPECT_EQ(r.options->node_rank, -1);
  EXPECT_TRUE(r.options->token.empty());
  EXPECT_NE(r.options->token_warning.find("unauthenticated"), std::string::npos);
  EXPECT_NE(r.options->token_warning.find("--token-file"), std::string::npos);
  ParseResult with = parse({"--nnodes=2", "--rdzv=master:29500", "--token=s", "./train"});
  ASSERT_TRUE(with.options.has_value());
  EXPECT_TRUE(with.options->token_warning.empty());
}

TEST(Options, TorchrunsFlagsMapOntoDtruns) {
  ParseResult r =
      parse({"--master-addr=10.0.0.2", "--master-port=29511", "--nnodes=2", "--node-rank=1",
             "--rdzv-backend=static", "--rdzv-id=job7", "--token=t", "prog"});
  ASSERT_TRUE(r.options.has_value()) << r.message;
  EXPECT_EQ(r.options->rdzv_host, "10.0.0.2");
  EXPECT_EQ(r.options->rdzv_port, 29511);
  EXPECT_EQ(r.options->rdzv_id, "job7");
  ParseResult standalone = parse({"--standalone", "--rdzv-backend=c10d", "prog"});
  ASSERT_TRUE(standalone.options.has_value()) << standalone.message;
  EXPECT_EQ(standalone.options->rdzv_port, 0);
  expect_error({"--standalone", "--nnodes=2", "prog"}, "--standalone runs one node");
  expect_error({"--rdzv-backend=zookeeper", "prog"}, "accepts c10d and static");
  expect_error({"--rdzv-backend=static", "--nnodes=2", "--rdzv=h:1", "prog"},
               "static needs --node-rank");
  expect_error({"--rdzv=h:1", "--master-addr=h", "prog"}, "not both");
}

TEST(Options, PythonProgramsRunAsTorchrunRunsThem) {
  ParseResult script = parse({"train.py", "--lr", "1"});
  EXPECT_EQ(script.options->program, "python3");
  EXPECT_EQ(script.options->args, (std::vector<std::string>{"train.py", "--lr", "1"}));
  ParseResult module = parse({"-m", "pkg.train", "--lr", "1"});
  EXPECT_EQ(module.options->program, "python3");
  EXPECT_EQ(module.options->args, (std::vector<std::string>{"-m", "pkg.train", "--lr", "1"}));
  ParseResult as_is = parse({"--no-python", "./train.py"});
  EXPECT_EQ(as_is.options->program, "./train.py");
}

TEST(Options, RedirectsTeeAndLocalRanksFilter) {
  ParseResult r =
      parse({"--log-dir=/tmp/x", "--redirects=3", "--tee=2", "--local-ranks-filter=0,2", "prog"});
  ASSERT_TRUE(r.options.has_value()) << r.message;
  EXPECT_EQ(r.options->redirects, 1) << "stderr is tee'd: only stdout stays off the console";
  EXPECT_EQ(r.options->local_ranks_filter, (std::vector<int>{0, 2}));
  expect_error({"--redirects=3", "prog"}, "give --log-dir");
  expect_error({"--log-dir=/tmp/x", "--redirects=0:3,1:0", "prog"}, "per-rank values");
  expect_error({"--local-ranks-filter=0,x", "prog"}, "--local-ranks-filter=x: not a number");
}

TEST(Options, TokenFile) {
  const std::string path = ::testing::TempDir() + "dtrun_token_test";
  {
    std::ofstream out(path);
    out << "s3cret \nsecond line\n";
  }
  ParseResult r = parse({"--nnodes=2", "--rdzv=h:1", "--token-file", path.c_str(), "prog"});
  ASSERT_TRUE(r.options.has_value()) << r.message;
  EXPECT_EQ(r.options->token, "s3cret");
  expect_error({"--token-file=/nonexistent/dtrun_token", "prog"}, "cannot read it");
  expect_error({"--token=a", "--token-file", path.c_str(), "prog"}, "not both");
  { std::ofstream(path).flush(); }
  expect_error({"--token-file", path.c_str(), "prog"}, "the file is empty");
  std::remove(path.c_str());
}

TEST(Options, ElasticNnodesIsARange) {
  ParseResult r = parse({"--nnodes=2:4", "--rdzv=h:1", "--token=t", "--rdzv-last-call=2", "prog"});
  ASSERT_TRUE(r.options) << r.message;
  EXPECT_EQ(r.options->min_nodes, 2);
  EXPECT_EQ(r.options->nnodes, 4);
  EXPECT_EQ(r.options->last_call, std::chrono::seconds(2));
  ParseResult fixed = parse({"--nnodes=3", "--rdzv=h:1", "--token=t", "prog"});
  ASSERT_TRUE(fixed.options) << fixed.message;
  EXPECT_EQ(fixed.options->min_nodes, 3);
  expect_error({"--nnodes=4:2", "--rdzv=h:1", "prog"}, "MIN must not exceed MAX");
  expect_error({"--nnodes=2:x", "--rdzv=h:1", "prog"}, "--nnodes (MAX)=x: not a number");
  expect_error({"--nnodes=:3", "--rdzv=h:1", "prog"}, "--nnodes=MIN:MAX");
  expect_error({"--nnodes=1:3", "prog"}, "needs --rdzv");
  expect_error({"--nnodes=2:4", "--node-rank=1", "--rdzv=h:1", "--token=t", "prog"},
               "numbers its nodes anew each round");
}

// srun --ntasks-per-node=1 dtrun --nproc-per-node=8 ./train: the step gives
// the node count, the node rank and the rendezvous host.
TEST(Options, UnderSrunTheStepPlacesTheNode) {
  ParseContext c;
  c.slurm = SlurmStep{.nnodes = 2,
                      .node_id = 1,
                      .ntasks = 2,
                      .job_id = 4321,
                      .step_id = 3,
                      .nodelist = "gpu[07-08]"};
  ParseResult r = parse({"--nproc-per-node=8", "--token=t", "./train"}, c);
  ASSERT_TRUE(r.options) << r.message;
  EXPECT_TRUE(r.options->from_slurm);
  EXPECT_EQ(r.options->nnodes, 2);
  EXPECT_EQ(r.options->node_rank, 1);
  EXPECT_EQ(r.options->rdzv_host, "gpu07");
  EXPECT_EQ(r.options->rdzv_port, 20000 + 321 * 10 + 3);
  // Flags still win.
  ParseResult own = parse({"--rdzv=10.0.0.9:29500", "--token=t", "./train"}, c);
  ASSERT_TRUE(own.options) << own.message;
  EXPECT_EQ(own.options->rdzv_host, "10.0.0.9");
  EXPECT_EQ(own.options->node_rank, 1);
  // One task per node, or a clear error.
  c.slurm->ntasks = 16;
  expect_error({"--nproc-per-node=8", "./train"}, "use srun --ntasks-per-node=1", c);
  c.slurm->ntasks = 2;
  c.slurm->nodelist = "gpu[07";
  expect_error({"--nproc-per-node=8", "./train"}, "cannot read Slurm's node list", c);
}

TEST(Options, RecoveryFlag) {
  EXPECT_FALSE(parse({"prog"}).options->recovery_in_process);
  EXPECT_FALSE(parse({"--recovery=restart", "prog"}).options->recovery_in_process);
  EXPECT_TRUE(parse({"--recovery", "in-process", "prog"}).options->recovery_in_process);
  expect_error({"--recovery=inprocess", "prog"}, "--recovery=inprocess must be restart");
  expect_error({"--recovery=", "prog"}, "--recovery");
}

// Spares: a count, in-process recovery, a Python program.
TEST(Options, SpareWorkersNeedInProcessRecoveryAndPython) {
  EXPECT_EQ(parse({"prog"}).options->spare_workers, 0);
  ParseResult r = parse({"--recovery=in-process", "--spare-workers=2", "train.py"});
  ASSERT_TRUE(r.options.has_value()) << r.message;
  EXPECT_EQ(r.options->spare_workers, 2);
  EXPECT_EQ(r.options->program, "python3");
  EXPECT_TRUE(parse({"--recovery=in-process", "--spare-workers=1", "/opt/venv/bin/python3.11", "-m",
                     "pkg.train"})
                  .options.has_value());
  EXPECT_TRUE(
      parse({"--recovery=in-process", "--spare-workers=1", "-m", "pkg.train"}).options.has_value());
  expect_error({"--spare-workers=1", "train.py"}, "give --recovery=in-process too");
  expect_error({"--recovery=in-process", "--spare-workers=1", "./trainer"},
               "--spare-workers needs a Python program");
  expect_error({"--recovery=in-process", "--spare-workers=1", "--no-python", "run.py"},
               "'run.py' is not a Python interpreter");
  expect_error({"--recovery=in-process", "--spare-workers=-1", "train.py"}, "--spare-workers");
  expect_error({"--recovery=in-process", "--spare-workers=65", "train.py"}, "--spare-workers");
  expect_error({"--recovery=in-process", "--spare-workers=two", "train.py"}, "--spare-workers");
  expect_error({"--recovery=in-process", "--spare-workers=", "train.py"}, "--spare-workers");
}

// The etcd backend: the members in --rdzv, a job id, no --node-rank.
TEST(Options, EtcdBackendTakesTheMembersAndAJobId) {
  ParseResult r = parse({"--nnodes=2:4", "--rdzv-backend=etcd-v2",
                         "--rdzv=10.0.0.5:2379,etcd-b:2379,[fd00::1]:2379", "--rdzv-id=run-7",
                         "--token=t", "prog"});
  ASSERT_TRUE(r.options.has_value()) << r.message;
  ASSERT_EQ(r.options->etcd_endpoints.size(), 3u);
  EXPECT_EQ(r.options->etcd_endpoints[1], "etcd-b:2379");
  EXPECT_EQ(r.options->etcd_endpoints[2], "[fd00::1]:2379");
  EXPECT_EQ(r.options->rdzv_host, "10.0.0.5");  // the first member: this node's route
  EXPECT_EQ(r.options->rdzv_port, 2379);
  EXPECT_TRUE(parse({"--nnodes=2", "--rdzv=h:1", "prog"}).options->etcd_endpoints.empty());
  expect_error({"--nnodes=2", "--rdzv-backend=etcd", "--rdzv-id=j", "prog"},
               "needs --rdzv=HOST:PORT[,HOST:PORT...]");
  expect_error({"--nnodes=2", "--rdzv-backend=etcd", "--rdzv=h:2379", "prog"},
               "needs --rdzv-id=NAME");
  expect_error({"--nnodes=2", "--rdzv-backend=etcd", "--rdzv=h:2379", "--rdzv-id=a/b", "prog"},
               "needs --rdzv-id=NAME");
  expect_error({"--nnodes=2", "--rdzv-backend=etcd", "--rdzv=h:2379", "--rdzv-id=j",
                "--node-rank=1", "prog"},
               "leave out --node-rank");
  expect_error(
      {"--nnodes=2", "--rdzv-backend=etcd", "--rdzv=h:2379,,h2:2379", "--rdzv-id=j", "prog"},
      "'' is not HOST:PORT");
  expect_error(
      {"--nnodes=2", "--rdzv-backend=etcd", "--rdzv=h:2379,h2:99999", "--rdzv-id=j", "prog"},
      "'h2:99999' is not HOST:PORT");
  expect_error({"--nnodes=2", "--rdzv-backend=etcd", "--rdzv=h:2379,h2", "--rdzv-id=j", "prog"},
               "'h2' is not HOST:PORT");
}

}  // namespace
}  // namespace rtd::launcher
