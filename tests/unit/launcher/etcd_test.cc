// The etcd client, the agent's lease and the host's election, against a real
// etcd (one member, started here on free ports). Skipped, saying so, where
// etcd is not installed (deploy/install_deps.sh installs etcd-server).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "launcher/etcd/etcd_client.h"
#include "launcher/etcd/etcd_hosting.h"
#include "launcher/etcd/etcd_lease.h"
#include "launcher/etcd/etcd_store.h"
#include "launcher/etcd/store_relay.h"
#include "launcher/net.h"
#include "rt_dist/error.h"
#include "tests/testing/store_contract.h"

extern char** environ;

namespace rtd::launcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::system_clock;

bool have_etcd() { return std::system("command -v etcd >/dev/null 2>&1") == 0; }

// One etcd member on 127.0.0.1, its data in a temporary directory.
class EtcdProcess {
 public:
  EtcdProcess() {
    dir_ = std::filesystem::temp_directory_path() / ("rtd-etcd-" + random_token().substr(0, 8));
    std::filesystem::create_directories(dir_);
    client_port_ = free_port("127.0.0.1");
    const int peer = free_port("127.0.0.1");
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    std::vector<std::string> args = {"etcd",
                                     "--name=t",
                                     "--data-dir=" + (dir_ / "data").string(),
                                     "--listen-client-urls=" + client,
                                     "--advertise-client-urls=" + client,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=t=" + peer_url};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // Its log to a file (read it where a test fails to start etcd).
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    const std::string log = (dir_ / "log").string();
    posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    if (posix_spawnp(&pid_, "etcd", &files, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&files);
  }
  ~EtcdProcess() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Stops and resumes the member (SIGSTOP, SIGCONT): its connections stay, unanswered.
  void pause() {
    if (pid_ > 0) kill(pid_, SIGSTOP);
  }
  void resume() {
    if (pid_ > 0) kill(pid_, SIGCONT);
  }
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }
  // Until a read answers (at most 40 s).
  bool ready() {
    if (pid_ <= 0) return false;
    // Its port first: a gRPC connection refused while etcd starts is retried
    // only after gRPC's connection timeout (about 10 s here).
    for (int i = 0; i < 200 && !accepts_tcp("127.0.0.1", client_port_, 100); ++i)
      std::this_thread::sleep_for(milliseconds(100));
    EtcdClient c({endpoint()}, {}, milliseconds(1000));
    for (int i = 0; i < 40; ++i) {
      try {
        c.get("probe");
        return true;
      } catch (const Error&) {
        std::this_thread::sleep_for(milliseconds(500));
      }
    }
    return false;
  }

 private:
  std::filesystem::path dir_;
  int client_port_ = 0;
  pid_t pid_ = -1;
};

class EtcdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_etcd()) return;
    etcd_ = new EtcdProcess();
    ASSERT_TRUE(etcd_->ready()) << "etcd did not start";
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override {
    if (!etcd_)
      GTEST_SKIP() << "etcd is not installed (deploy/install_deps.sh installs etcd-server)";
    client_ = std::make_unique<EtcdClient>(std::vector<std::string>{etcd_->endpoint()}, TlsFiles{},
                                           milliseconds(3000));
    prefix_ = "/test/" + random_token().substr(0, 8) + "/";
  }
  static EtcdProcess* etcd_;
  std::unique_ptr<EtcdClient> client_;
  std::string prefix_;
};
EtcdProcess* EtcdTest::etcd_ = nullptr;

TEST_F(EtcdTest, KeysAndTheCreateTransaction) {
  EXPECT_FALSE(client_->get(prefix_ + "a").has_value());
  client_->put(prefix_ + "a", std::string("x\0y", 3));
  auto a = client_->get(prefix_ + "a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->value, std::string("x\0y", 3));
  EXPECT_TRUE(client_->create(prefix_ + "b", "first"));
  EXPECT_FALSE(client_->create(prefix_ + "b", "second"));
  EXPECT_EQ(client_->get(prefix_ + "b")->value, "first");
  EXPECT_EQ(client_->get_prefix(prefix_).size(), 2u);
  EXPECT_FALSE(client_->remove_if(prefix_ + "b", "second"));
  EXPECT_TRUE(client_->remove_if(prefix_ + "b", "first"));
  client_->remove_prefix(prefix_);
  EXPECT_TRUE(client_->get_prefix(prefix_).empty());
}

TEST_F(EtcdTest, ALeasedKeyGoesWithItsLease) {
  const std::int64_t lease = client_->grant(seconds(10));
  client_->put(prefix_ + "k", "v", lease);
  EXPECT_GT(client_->keep_alive(lease), 0);
  client_->revoke(lease);
  EXPECT_FALSE(client_->get(prefix_ + "k").has_value());
  EXPECT_LE(client_->keep_alive(lease), 0) << "a revoked lease renews to nothing";
}

TEST_F(EtcdTest, AWatchSeesAChangeOrTimesOut) {
  std::int64_t revision = 0;
  client_->get(prefix_ + "w", &revision);
  EXPECT_FALSE(client_->wait_change(prefix_ + "w", revision, Clock::now() + milliseconds(300)));
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(200));
    client_->put(prefix_ + "w", "1");
  });
  EXPECT_TRUE(client_->wait_change(prefix_ + "w", revision, Clock::now() + seconds(10)));
  writer.join();
  // A change made before the watch starts is seen too (it watches from the revision).
  client_->get(prefix_ + "w", &revision);
  client_->put(prefix_ + "w", "2");
  EXPECT_TRUE(client_->wait_change(prefix_ + "w", revision, Clock::now() + seconds(10)));
}

std::shared_ptr<EtcdClient> shared_client(const std::string& endpoint) {
  return std::make_shared<EtcdClient>(std::vector<std::string>{endpoint}, TlsFiles{},
                                      milliseconds(3000));
}

TEST_F(EtcdTest, TheWorkersStoreInEtcdFollowsTheStoreContract) {
  auto store = make_etcd_store(shared_client(etcd_->endpoint()), prefix_ + "store/");
  testing_util::check_store_contract(*store);
  // Its keys are under its prefix, and nowhere else.
  store->set("k", "v");
  EXPECT_EQ(client_->get(prefix_ + "store/k")->value, "v");
  EXPECT_FALSE(client_->get("k").has_value());
}

// Adds from several threads at once: every transaction that lost a race is
// tried again, none is lost or counted twice; a check of many keys sees
// each one (read as one range).
TEST_F(EtcdTest, TheWorkersStoreCountsRacingAddsAndChecksManyKeys) {
  auto store = make_etcd_store(shared_client(etcd_->endpoint()), prefix_ + "store/");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) store->add("count", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->add("count", 0), 100);
  std::vector<std::string> keys;
  for (int r = 0; r < 20; ++r) keys.push_back("capable/" + std::to_string(r));
  for (int r = 0; r < 19; ++r) store->set(keys[static_cast<std::size_t>(r)], "1");
  store->set("capable/190", "1");  // under the same prefix, not asked for
  EXPECT_FALSE(store->check(keys)) << "capable/19 is missing";
  store->set("capable/19", "1");
  EXPECT_TRUE(store->check(keys));
}

// The node's relay serves its workers the store in etcd as dtrun's own
// store does: the token checked, waits woken by writes from elsewhere (another
// node's relay), limits refused with the limit named.
TEST_F(EtcdTest, TheRelayServesTheStoreInEtcdToTheWorkers) {
  auto in_etcd = make_etcd_store(shared_client(etcd_->endpoint()), prefix_ + "store/");
  StoreRelay relay("127.0.0.1", in_etcd, "secret", TlsFiles{});
  const std::string address = "127.0.0.1:" + std::to_string(relay.port());
  auto worker = make_grpc_store(address, "secret");
  testing_util::check_store_contract(*worker);

  std::thread other_node([&] {
    std::this_thread::sleep_for(milliseconds(200));
    in_etcd->set("late", "here");
  });
  EXPECT_EQ(worker->get("late", milliseconds(10000)), "here");
  other_node.join();

  for (const std::string token : {"wrong", ""}) {
    try {
      make_grpc_store(address, token)->set("k", "v");
      ADD_FAILURE() << "token '" << token << "' was let in";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
    }
  }
  try {
    worker->set("big", std::string((1u << 20) + 1, 'x'));
    ADD_FAILURE() << "a value over the limit was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("over the job's store limit"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(in_etcd->try_get("big").has_value());
}

// etcd paused for longer than a call may take, shorter than the lease: the
// relay rides it out and the worker's call succeeds once etcd answers again
// (it once failed, and the worker aborted). Once the lease is lost, a call
// that finds etcd unavailable fails saying so.
TEST_F(EtcdTest, TheRelayRidesOutAPauseWhileTheLeaseHolds) {
  auto client = std::make_shared<EtcdClient>(std::vector<std::string>{etcd_->endpoint()},
                                             TlsFiles{}, milliseconds(800));
  auto in_etcd = make_etcd_store(client, prefix_ + "store/");
  std::atomic<bool> lease_lost{false};
  StoreRelay relay("127.0.0.1", in_etcd, "secret", TlsFiles{},
                   [&] { return lease_lost ? std::string("gone for the test") : std::string(); });
  auto worker = make_grpc_store("127.0.0.1:" + std::to_string(relay.port()), "secret");
  worker->set("before", "1");
  etcd_->pause();
  std::thread resume([&] {
    std::this_thread::sleep_for(milliseconds(2500));  // three of the client's timeouts
    etcd_->resume();
  });
  EXPECT_NO_THROW(worker->set("during", "2"));
  EXPECT_EQ(worker->add("count", 1), 1);
  resume.join();
  EXPECT_EQ(in_etcd->try_get("during"), "2");

  lease_lost = true;
  etcd_->pause();
  try {
    worker->set("after", "3");
    ADD_FAILURE() << "a store call went through with etcd paused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this node lost its lease in etcd: gone for the test"),
              std::string::npos)
        << e.what();
  }
  etcd_->resume();
}

// A relay that ends while a worker's get waits ends the wait (within a slice).
TEST_F(EtcdTest, AWaitingGetEndsWithTheRelay) {
  auto in_etcd = make_etcd_store(shared_client(etcd_->endpoint()), prefix_ + "store/");
  auto relay = std::make_unique<StoreRelay>("127.0.0.1", in_etcd, "", TlsFiles{});
  auto worker = make_grpc_store("127.0.0.1:" + std::to_string(relay->port()), "");
  std::thread waiter([&] { EXPECT_THROW(worker->get("never", milliseconds(60000)), Error); });
  std::this_thread::sleep_for(milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  relay.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, seconds(5));
  waiter.join();
}

// A member that is down is passed over; none answering is an error naming them.
TEST_F(EtcdTest, DeadMembersArePassedOverAndNamed) {
  const std::string dead = "127.0.0.1:" + std::to_string(free_port("127.0.0.1"));
  EtcdClient both({dead, etcd_->endpoint()}, {}, milliseconds(3000));
  both.put(prefix_ + "x", "1");
  EXPECT_EQ(both.get(prefix_ + "x")->value, "1");
  EtcdClient none({dead}, {}, milliseconds(800));
  try {
    none.get(prefix_ + "x");
    FAIL() << "no member answered, yet the read returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("etcd at " + dead), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no member answered"), std::string::npos) << e.what();
  }
}

std::unique_ptr<RendezvousServer> test_server(const std::optional<ResumeFrom>& resume,
                                              std::optional<ResumeFrom>* seen) {
  *seen = resume;
  return std::make_unique<RendezvousServer>(
      ServerOptions{.bind_ip = "127.0.0.1", .token = "t", .resume = resume});
}

// An add whose every reply is lost for longer than the client's timeout:
// the call gives up unsure whether it committed, and the relay tries the
// request again. It counts once (before, the second try read the committed
// count and added again: 2).
TEST_F(EtcdTest, AnAddTheRelayTriesAgainAfterAnUnsureFailureCountsOnce) {
  auto client = std::make_shared<EtcdClient>(std::vector<std::string>{etcd_->endpoint()},
                                             TlsFiles{}, milliseconds(800));
  std::mutex mu;
  std::optional<std::chrono::steady_clock::time_point> first;
  int dropped = 0;
  client->set_fault_hook([&](const std::string& what) {
    if (what.rfind("writing '", 0) != 0 || what.find("store/count'") == std::string::npos)
      return false;
    std::lock_guard<std::mutex> lock(mu);
    const auto now = std::chrono::steady_clock::now();
    if (!first) first = now;
    const bool drop = now - *first < milliseconds(1500);  // past one call's timeout
    dropped += drop;
    return drop;
  });
  auto in_etcd = make_etcd_store(client, prefix_ + "store/");
  StoreRelay relay("127.0.0.1", in_etcd, "secret", TlsFiles{}, [] { return std::string(); });
  auto worker = make_grpc_store("127.0.0.1:" + std::to_string(relay.port()), "secret");
  EXPECT_EQ(worker->add("count", 1), 1);
  EXPECT_GT(dropped, 1) << "the first try's replies were dropped until it gave up";
  EXPECT_EQ(worker->add("count", 1), 2);
  EXPECT_EQ(in_etcd->add("count", 0), 2);
}

// The first agent is elected, the second finds it; when the first goes (its
// lease revoked), the second is elected and takes its recorded round over,
// the first named lost.
// A transaction that committed and whose reply was lost (a deadline, a
// leader change) is tried again: its receipt makes it count once. Before,
// the retry's comparison failed against its own write: an add counted
// twice, and a create said the key was another's.
TEST_F(EtcdTest, ACommittedWriteWhoseReplyIsLostCountsOnce) {
  auto client = shared_client(etcd_->endpoint());
  std::atomic<int> dropped{0};
  std::atomic<bool> drop_next{true};
  client->set_fault_hook([&](const std::string& what) {
    if (what.find(prefix_) == std::string::npos || !drop_next.exchange(false)) return false;
    ++dropped;
    return true;
  });
  auto store = make_etcd_store(client, prefix_ + "store/");
  EXPECT_EQ(store->add("count", 1), 1);
  EXPECT_EQ(dropped, 1) << "the first write's reply was dropped";
  drop_next = true;
  EXPECT_EQ(store->add("count", 1), 2);
  EXPECT_EQ(store->add("count", 0), 2);
  drop_next = true;
  EXPECT_EQ(store->compare_set("cas", "", "mine"), "mine");
  drop_next = true;
  EXPECT_TRUE(client->create(prefix_ + "claimed", "electing me"));
  EXPECT_FALSE(client->create(prefix_ + "claimed", "electing another"))
      << "a create of a key that was there before is still refused";
  EXPECT_EQ(dropped, 4);
  EXPECT_TRUE(client_->get_prefix("/dtrun-receipts/").empty()) << "every receipt deleted";
}

// The host's election with the reply of the winning create lost: the
// retrying agent knows its own claim and hosts at once (before, every agent
// waited until --rdzv-timeout for a host that never came).
TEST_F(EtcdTest, AnElectionWhoseClaimsReplyIsLostIsWon) {
  const std::string job = "job-" + random_token().substr(0, 8);
  EtcdHosting hosting(EtcdHostingOptions{.endpoints = {etcd_->endpoint()},
                                         .job = job,
                                         .ttl = seconds(5),
                                         .node_id = "only",
                                         .node_addr = "127.0.0.1"});
  std::atomic<bool> drop_next{true};
  hosting.client().set_fault_hook([&](const std::string& what) {
    return what.find("/host'") != std::string::npos && drop_next.exchange(false);
  });
  std::optional<ResumeFrom> seen;
  std::unique_ptr<RendezvousServer> server;
  const auto until = Clock::now() + seconds(8);
  auto start = [&](const std::optional<ResumeFrom>& r) { return test_server(r, &seen); };
  const auto began = Clock::now();
  const std::string host = hosting.find_host("", until, start, &server);
  EXPECT_FALSE(drop_next) << "the claim's reply was dropped";
  ASSERT_NE(server, nullptr) << "the agent whose claim committed hosts";
  EXPECT_LT(Clock::now() - began, seconds(5));
  EXPECT_EQ(host, "127.0.0.1:" + std::to_string(server->port()));
}

TEST_F(EtcdTest, AnAgentIsElectedAndASurvivorTakesOver) {
  const std::string job = "job-" + random_token().substr(0, 8);
  auto options = [&](const std::string& id) {
    return EtcdHostingOptions{.endpoints = {etcd_->endpoint()},
                              .job = job,
                              .ttl = seconds(5),
                              .node_id = id,
                              .node_addr = "127.0.0.1"};
  };
  auto first = std::make_unique<EtcdHosting>(options("first"));
  EtcdHosting second(options("second"));
  std::optional<ResumeFrom> seen;
  std::unique_ptr<RendezvousServer> first_server, second_server;
  const auto until = Clock::now() + seconds(20);
  auto start = [&](const std::optional<ResumeFrom>& r) { return test_server(r, &seen); };
  const std::string host = first->find_host("", until, start, &first_server);
  ASSERT_NE(first_server, nullptr);
  EXPECT_FALSE(seen.has_value()) << "a new job";
  EXPECT_EQ(second.find_host("", until, start, &second_server), host);
  EXPECT_EQ(second_server, nullptr);

  proto::RoundRecord record;
  record.set_round(4);
  record.set_run_id("r");
  for (const char* id : {"first", "second"}) {
    auto* m = record.add_members();
    m->set_node_id(id);
    m->set_host("127.0.0.1");
    m->set_node_rank(record.members_size() - 1);
    m->set_secret(std::string("s-") + id);
  }
  first->record(record);
  first->job_store("r")->set("workers-key", "v");
  first_server.reset();
  first.reset();  // exits: its lease (and the host key) go at once
  const std::string next = second.find_host(host, until, start, &second_server);
  ASSERT_NE(second_server, nullptr);
  EXPECT_NE(next, host);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->record.round(), 4);
  EXPECT_EQ(seen->lost.count("first"), 1u);
  EXPECT_EQ(seen->lost.count("second"), 0u);
  EXPECT_TRUE(second.lost().empty());
  EXPECT_EQ(second.job_store("r")->try_get("workers-key"), "v")
      << "the workers' store outlives the host";
  second.forget_job();
  EXPECT_FALSE(second.job_store("r")->try_get("workers-key").has_value())
      << "the job's end takes its store";
}

// A record that no living agent is in (an earlier job under the same id) is
// not taken over.
TEST_F(EtcdTest, ARecordOfAGoneJobIsNotTakenOver) {
  const std::string job = "job-" + random_token().substr(0, 8);
  proto::RoundRecord old;
  old.set_round(9);
  old.add_members()->set_node_id("long-gone");
  client_->put("/dtrun/" + job + "/round", old.SerializeAsString());
  client_->put("/dtrun/" + job + "/store/old-run/k", "v");
  EtcdHosting agent(EtcdHostingOptions{.endpoints = {etcd_->endpoint()},
                                       .job = job,
                                       .ttl = seconds(5),
                                       .node_id = "new",
                                       .node_addr = "127.0.0.1"});
  std::optional<ResumeFrom> seen;
  std::unique_ptr<RendezvousServer> server;
  agent.find_host(
      "", Clock::now() + seconds(10),
      [&](const std::optional<ResumeFrom>& r) { return test_server(r, &seen); }, &server);
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(seen.has_value());
  EXPECT_FALSE(client_->get("/dtrun/" + job + "/round").has_value()) << "the stale record goes";
  EXPECT_FALSE(client_->get("/dtrun/" + job + "/store/old-run/k").has_value())
      << "and so does the gone job's store";
}

// What an agent reads in etcd is checked: a host key that is not an address
// is an error naming it, an unreadable round record is not taken over.
TEST_F(EtcdTest, ForeignValuesInTheJobsKeysAreRefusedOrIgnored) {
  const std::string job = "job-" + random_token().substr(0, 8);
  const std::string prefix = "/dtrun/" + job + "/";
  client_->put(prefix + "round", std::string("\xff\xfe not a record"));
  EtcdHosting agent(EtcdHostingOptions{.endpoints = {etcd_->endpoint()},
                                       .job = job,
                                       .ttl = seconds(5),
                                       .node_id = "n",
                                       .node_addr = "127.0.0.1"});
  std::optional<ResumeFrom> seen;
  std::unique_ptr<RendezvousServer> server;
  auto start = [&](const std::optional<ResumeFrom>& r) { return test_server(r, &seen); };
  agent.find_host("", Clock::now() + seconds(10), start, &server);
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(seen.has_value()) << "an unreadable record is not taken over";

  const std::string other = "job-" + random_token().substr(0, 8);
  client_->put("/dtrun/" + other + "/host", "garbage");
  EtcdHosting second(EtcdHostingOptions{.endpoints = {etcd_->endpoint()},
                                        .job = other,
                                        .ttl = seconds(5),
                                        .node_id = "m",
                                        .node_addr = "127.0.0.1"});
  std::unique_ptr<RendezvousServer> none;
  try {
    second.find_host("", Clock::now() + seconds(10), start, &none);
    FAIL() << "a host key holding 'garbage' was followed";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
    EXPECT_NE(std::string(e.what()).find("holds 'garbage'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("another --rdzv-id"), std::string::npos) << e.what();
  }
}

// etcd gone: the lease is lost within its TTL, and says why. It stops etcd:
// the suite's last test.
TEST_F(EtcdTest, TheLeaseIsLostWhenEtcdIsGone) {
  EtcdClient c({etcd_->endpoint()}, {}, milliseconds(2000));
  EtcdLease lease(c, seconds(2));
  std::this_thread::sleep_for(milliseconds(800));
  EXPECT_TRUE(lease.lost().empty()) << lease.lost();
  etcd_->stop();
  const auto stopped = std::chrono::steady_clock::now();
  std::string why;
  for (int i = 0; i < 100 && why.empty(); ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    why = lease.lost();
  }
  EXPECT_NE(why.find("no etcd member renewed this node's lease for 2 s"), std::string::npos) << why;
  // Said once the TTL is over (it was last renewed before the stop), not
  // when a renewal attempt gives up later (it once took up to twice the TTL).
  EXPECT_LE(std::chrono::steady_clock::now() - stopped, milliseconds(2000 + 500));
}

}  // namespace
}  // namespace rtd::launcher
