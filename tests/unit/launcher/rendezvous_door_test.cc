// The rendezvous host against hostile calls, on loopback: malformed joins,
// ranks it cannot hold, calls that speak for another node, a store pushed
// past its bounds. Each is refused for its caller alone; the job still forms.
#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <climits>
#include <future>
#include <thread>

#include "launcher/heartbeats.h"
#include "launcher/rendezvous_server.h"
#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "rt_dist/store.h"
#include "runtime/core/store/grpc_status.h"

namespace rtd::launcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kToken = "tok";

// A Get sent without waiting for its answer (a completion queue's tag).
struct WaitingGet {
  grpc::ClientContext ctx;
  grpc::Status status;
  proto::GetResponse response;
  std::unique_ptr<grpc::ClientAsyncResponseReader<proto::GetResponse>> reader;
};

// n Gets of key, each willing to wait 20 s, answered into cq.
std::vector<std::unique_ptr<WaitingGet>> start_gets(proto::Store::Stub& stub,
                                                    grpc::CompletionQueue& cq, int n,
                                                    const std::string& key) {
  std::vector<std::unique_ptr<WaitingGet>> calls;
  for (int i = 0; i < n; ++i) {
    auto c = std::make_unique<WaitingGet>();
    c->ctx.AddMetadata(kTokenMetadataKey, kToken);
    c->ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
    proto::GetRequest req;
    req.set_key(key);
    req.set_timeout_ms(20000);
    c->reader = stub.AsyncGet(&c->ctx, req, &cq);
    c->reader->Finish(&c->response, &c->status, c.get());
    calls.push_back(std::move(c));
  }
  return calls;
}

class RendezvousDoorTest : public testing::Test {
 protected:
  void start(int min_nodes, int max_nodes, StoreServiceLimits limits = {},
             milliseconds heartbeat_timeout = milliseconds(30000)) {
    server_ =
        std::make_unique<RendezvousServer>(ServerOptions{.bind_ip = "127.0.0.1",
                                                         .port = 0,
                                                         .token = kToken,
                                                         .min_nodes = min_nodes,
                                                         .max_nodes = max_nodes,
                                                         .nproc_per_node = 1,
                                                         .fingerprint = "f",
                                                         .master_port = 1,
                                                         .last_call = milliseconds(300),
                                                         .heartbeat_timeout = heartbeat_timeout,
                                                         .host_node_id = "host",
                                                         .store_limits = limits});
    address_ = "127.0.0.1:" + std::to_string(server_->port());
    stub_ = proto::Rendezvous::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }
  proto::JoinRequest request(const std::string& id, int node_rank, int max_nodes, int min_nodes) {
    proto::JoinRequest r;
    r.set_host("127.0.0.1");
    r.set_node_id(id);
    r.set_node_rank(node_rank);
    r.set_nnodes(max_nodes);
    r.set_min_nodes(min_nodes);
    r.set_nproc_per_node(1);
    r.set_fingerprint("f");
    r.set_last_round(-1);
    return r;
  }
  grpc::Status join(const proto::JoinRequest& r, proto::JoinResponse* out,
                    milliseconds wait = milliseconds(10000)) {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kTokenMetadataKey, kToken);
    ctx.set_deadline(std::chrono::system_clock::now() + wait);
    return stub_->Join(&ctx, r, out);
  }
  std::future<std::pair<grpc::Status, proto::JoinResponse>> join_async(proto::JoinRequest r) {
    return std::async(std::launch::async, [this, r] {
      proto::JoinResponse out;
      grpc::Status s = join(r, &out);
      return std::make_pair(s, out);
    });
  }
  grpc::Status beat(int node_rank, const std::string& secret, proto::HeartbeatResponse* out) {
    proto::HeartbeatRequest r;
    r.set_round(0);
    r.set_node_rank(node_rank);
    r.set_agent_secret(secret);
    grpc::ClientContext ctx;
    ctx.AddMetadata(kTokenMetadataKey, kToken);
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    return stub_->Heartbeat(&ctx, r, out);
  }

  std::unique_ptr<RendezvousServer> server_;
  std::string address_;
  std::unique_ptr<proto::Rendezvous::Stub> stub_;
};

TEST_F(RendezvousDoorTest, MalformedJoinsAreRefusedAndTheJobStillForms) {
  start(2, 2);
  std::vector<proto::JoinRequest> bad;
  for (int rank : {-7, 2, INT_MAX, INT_MIN}) bad.push_back(request("s", rank, 2, 2));
  bad.push_back(request("", -1, 2, 2));
  bad.push_back(request("s", -1, 0, 0));
  bad.push_back(request("s", -1, 2, 3));
  proto::JoinRequest r = request("s", -1, 2, 2);
  r.set_host(std::string(10000, 'h'));
  bad.push_back(r);
  r.set_host("10.0.0.1\n; rm -rf");
  bad.push_back(r);
  r = request("s", -1, 2, 2);
  r.set_nproc_per_node(-1);
  bad.push_back(r);
  r = request("s", -1, 2, 2);
  r.set_restarts(-5);
  bad.push_back(r);
  for (const auto& b : bad) {
    proto::JoinResponse out;
    grpc::Status s = join(b, &out, milliseconds(2000));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << b.ShortDebugString() << ": " << s.error_message();
  }
  auto host = join_async(request("host", 0, 2, 2));
  auto other = join_async(request("b", -1, 2, 2));
  auto [hs, hl] = host.get();
  auto [os, ol] = other.get();
  ASSERT_TRUE(hs.ok()) << hs.error_message();
  ASSERT_TRUE(os.ok()) << os.error_message();
  EXPECT_EQ(hl.nnodes(), 2);
  EXPECT_EQ(ol.node_rank(), 1);
  EXPECT_FALSE(hl.agent_secret().empty());
  EXPECT_NE(hl.agent_secret(), ol.agent_secret());
}

// --nnodes=1:4 that closes with 2: a join asking for --node-rank=3 made the
// host index past its tables (a crash); now it alone is turned away.
TEST_F(RendezvousDoorTest, ARankAboveTheClosingCountIsTurnedAwayAlone) {
  start(1, 4);
  auto high = join_async(request("x", 3, 4, 1));
  std::this_thread::sleep_for(milliseconds(50));
  auto host = join_async(request("host", 0, 4, 1));
  auto b = join_async(request("b", -1, 4, 1));
  auto [hs, hl] = host.get();
  auto [bs, bl] = b.get();
  auto [xs, xl] = high.get();
  ASSERT_TRUE(hs.ok()) << hs.error_message();
  ASSERT_TRUE(bs.ok()) << bs.error_message();
  EXPECT_EQ(hl.nnodes(), 2);
  EXPECT_FALSE(xs.ok());
  EXPECT_NE(xs.error_message().find("--node-rank=3"), std::string::npos) << xs.error_message();
}

// Nobody but node 1's dtrun keeps node 1 alive, and nobody but the agents
// writes the agents' keys: a stranger's heartbeats and store writes for it
// are refused, and node 1's silence is still found.
TEST_F(RendezvousDoorTest, OnlyAnAgentSpeaksForItsNode) {
  start(2, 2, {}, milliseconds(1000));
  auto host = join_async(request("host", 0, 2, 2));
  auto b = join_async(request("b", -1, 2, 2));
  auto [hs, hl] = host.get();
  auto [bs, bl] = b.get();
  ASSERT_TRUE(hs.ok() && bs.ok());
  proto::HeartbeatResponse resp;
  EXPECT_EQ(beat(1, "", &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(beat(1, hl.agent_secret(), &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << "node 0's secret does not speak for node 1";
  EXPECT_TRUE(beat(1, bl.agent_secret(), &resp).ok());

  auto stranger = make_grpc_store(address_, kToken);
  for (const std::string& key : {"dtrun/round0/done", "dtrun/failed"}) {
    try {
      stranger->add(key, 2);
      ADD_FAILURE() << "a write of " << key << " without an agent's secret went through";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dtrun/"), std::string::npos) << e.what();
    }
  }
  stranger->set("worker/key", "v");  // the workers' own keys stay open to the token
  auto agent = make_grpc_store(address_, kToken, hl.agent_secret());
  EXPECT_EQ(agent->add("dtrun/round0/done", 1), 1);

  // The stranger keeps beating for node 1; node 1 is lost all the same.
  std::string failure;
  const auto give_up = std::chrono::steady_clock::now() + seconds(5);
  while (failure.empty() && std::chrono::steady_clock::now() < give_up) {
    beat(1, "", &resp);
    proto::HeartbeatResponse mine;
    ASSERT_TRUE(beat(0, hl.agent_secret(), &mine).ok());
    failure = mine.failure();
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_NE(failure.find("node 1"), std::string::npos) << "failure: '" << failure << "'";
}

// The host's own agent beats in its process: however loaded the server's
// gRPC is (here: no gRPC path at all), the host is neither silent to itself
// nor lost to its agent, and the news still reaches it.
TEST_F(RendezvousDoorTest, TheHostsOwnAgentBeatsInItsProcess) {
  const milliseconds timeout(1000);
  start(2, 2, {}, timeout);
  auto host = join_async(request("host", 0, 2, 2));
  auto b = join_async(request("b", -1, 2, 2));
  auto [hs, hl] = host.get();
  auto [bs, bl] = b.get();
  ASSERT_TRUE(hs.ok() && bs.ok());
  // Nothing listens at port 1: a beat through gRPC would find the host lost.
  HeartbeatClient own("127.0.0.1:1", kToken, hl.agent_secret(), timeout, {},
                      server_->in_process_beat());
  auto other = std::make_unique<HeartbeatClient>(address_, kToken, bl.agent_secret(), timeout);
  own.watch(0, 0, NodeState::kRunning, {});
  other->watch(0, 1, NodeState::kRunning, {});
  std::this_thread::sleep_for(3 * timeout);
  EXPECT_FALSE(own.news().has_value()) << own.news()->lost << own.news()->failure;
  EXPECT_FALSE(other->news().has_value()) << other->news()->lost << other->news()->failure;

  auto await_news = [&own] {  // up to 10 s
    std::optional<HeartbeatReply> news;
    const auto give_up = std::chrono::steady_clock::now() + seconds(10);
    while (!news && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(milliseconds(50));
      news = own.news();
    }
    return news;
  };
  other.reset();  // node 1's dtrun is gone: its held call closes
  std::optional<HeartbeatReply> news = await_news();
  ASSERT_TRUE(news.has_value()) << "the host's agent never heard that node 1 was lost";
  EXPECT_TRUE(news->lost.empty()) << news->lost;
  EXPECT_NE(news->failure.find("node 1"), std::string::npos) << news->failure;

  // The server going away first leaves the beat answering (the job's end).
  server_.reset();
  own.watch(0, 0, NodeState::kDone, {});
  news = await_news();
  ASSERT_TRUE(news.has_value());
  EXPECT_NE(news->failure.find("node 1"), std::string::npos) << news->failure;
}

TEST_F(RendezvousDoorTest, AJoinNamingAMembersIdMustCarryItsSecret) {
  start(1, 2);
  auto [hs, hl] = join_async(request("host", 0, 2, 1)).get();
  ASSERT_TRUE(hs.ok()) << hs.error_message();
  proto::JoinRequest imposter = request("host", -1, 2, 1);
  imposter.set_last_round(0);
  proto::JoinResponse out;
  grpc::Status s = join(imposter, &out, milliseconds(2000));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_message().find("agent id"), std::string::npos) << s.error_message();
}

TEST_F(RendezvousDoorTest, TheStoreRefusesWhatPassesItsQuota) {
  StoreServiceLimits limits;
  limits.store.max_keys = 10;
  limits.store.max_bytes = 4096;
  limits.store.max_value_bytes = 1000;
  start(1, 1, limits);
  auto store = make_grpc_store(address_, kToken);
  for (int i = 0; i < 10; ++i) store->set("k" + std::to_string(i), "v");
  auto expect_refused = [&](const std::function<void()>& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "expected a refusal naming " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kConfig) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused([&] { store->set("k10", "v"); }, "quota");
  store->set("k0", "overwrite");  // an existing key may change
  store->remove("k9");
  store->set("k10", "v");  // room again
  expect_refused([&] { store->set("k0", std::string(1001, 'x')); }, "1001 bytes");
  expect_refused([&] { store->set("k1", std::string(8 << 20, 'x')); }, "");
  expect_refused([&] { store->add("k3", 1); }, "not an integer");
  store->set("k5", "9223372036854775807");
  expect_refused([&] { store->add("k5", 1); }, "overflow");
}

// 2,000 Gets waiting at once hold no server thread each, and a write
// answers all of them; other calls go on meanwhile.
TEST_F(RendezvousDoorTest, WaitingGetsHoldNoThreads) {
  start(1, 1);
  auto stub =
      proto::Store::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  auto threads_now = [] {
    int n = 0;
    if (DIR* d = opendir("/proc/self/task")) {
      while (readdir(d)) ++n;
      closedir(d);
    }
    return n;
  };
  make_grpc_store(address_, kToken)->set("warm", "up");  // the server's own threads exist
  const int threads_before = threads_now();
  constexpr int kCalls = 2000;
  grpc::CompletionQueue cq;
  auto calls = start_gets(*stub, cq, kCalls, "late");
  auto store = make_grpc_store(address_, kToken);
  store->set("other", "v");  // answered while they wait
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_LT(threads_now() - threads_before, 50)
      << "threads added while " << kCalls << " calls wait (one a call before)";
  store->set("late", "here");
  for (int i = 0; i < kCalls; ++i) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    auto* c = static_cast<WaitingGet*>(tag);
    EXPECT_TRUE(c->status.ok()) << c->status.error_message();
    EXPECT_EQ(c->response.value(), "here");
  }
}

TEST_F(RendezvousDoorTest, AHugeTimeoutWaitsAndAnExpiredOneSaysTheRealTime) {
  start(1, 1);
  auto stub =
      proto::Store::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  auto get = [&](long long timeout_ms, proto::GetResponse* out) {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kTokenMetadataKey, kToken);
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    proto::GetRequest req;
    req.set_key("k");
    req.set_timeout_ms(timeout_ms);
    return stub->Get(&ctx, req, out);
  };
  auto waiting = std::async(std::launch::async, [&] {
    proto::GetResponse out;
    grpc::Status s = get(LLONG_MAX, &out);
    return s.ok() ? out.value() : "error: " + s.error_message();
  });
  EXPECT_EQ(waiting.wait_for(milliseconds(400)), std::future_status::timeout)
      << "a timeout that overflows must not return at once";
  make_grpc_store(address_, kToken)->set("k", "v");
  EXPECT_EQ(waiting.get(), "v");

  proto::GetResponse out;
  grpc::Status s = [&] {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kTokenMetadataKey, kToken);
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    proto::GetRequest req;
    req.set_key("never");
    req.set_timeout_ms(300);
    return stub->Get(&ctx, req, &out);
  }();
  ASSERT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  const auto at = s.error_message().find("within ");
  ASSERT_NE(at, std::string::npos) << s.error_message();
  EXPECT_GE(std::stoll(s.error_message().substr(at + 7)), 290) << s.error_message();
}

TEST_F(RendezvousDoorTest, AHeartbeatNamingTooManyKeysIsRefused) {
  start(1, 1);
  proto::HeartbeatRequest r;
  r.set_round(0);
  r.set_node_rank(0);
  for (int i = 0; i < 1000; ++i) r.add_keys("k" + std::to_string(i));
  grpc::ClientContext ctx;
  ctx.AddMetadata(kTokenMetadataKey, kToken);
  proto::HeartbeatResponse out;
  EXPECT_EQ(stub_->Heartbeat(&ctx, r, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Every request that names a key is held to the store's key limit, and
// waiting Gets are counted and weighed, in all and per peer host: a client
// cannot grow the host by gigabytes of waits (66,000 of them once did), and
// a refused one is refused for its caller alone.
TEST_F(RendezvousDoorTest, WaitingGetsAreWeighedAndBoundedAndLongKeysRefused) {
  StoreServiceLimits limits;
  limits.store.max_key_bytes = 64;
  limits.max_waiters_per_peer = 30;
  start(1, 1, limits);
  auto stub =
      proto::Store::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  const std::string long_key(65, 'k');
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kTokenMetadataKey, kToken);
    proto::GetRequest req;
    req.set_key(long_key);
    req.set_timeout_ms(60000);
    proto::GetResponse out;
    const grpc::Status s = stub->Get(&ctx, req, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kTokenMetadataKey, kToken);
    proto::CheckRequest req;
    req.add_keys("short");
    req.add_keys(long_key);
    proto::CheckResponse out;
    EXPECT_EQ(stub->Check(&ctx, req, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kTokenMetadataKey, kToken);
    proto::DeleteRequest req;
    req.set_key(long_key);
    proto::DeleteResponse out;
    EXPECT_EQ(stub->Delete(&ctx, req, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {  // a compare-and-set that would store nothing (its expected value differs) all the same
    grpc::ClientContext ctx;
    ctx.AddMetadata(kTokenMetadataKey, kToken);
    proto::CompareSetRequest req;
    req.set_key(long_key);
    req.set_expected("not there");
    req.set_desired("v");
    proto::CompareSetResponse out;
    EXPECT_EQ(stub->CompareSet(&ctx, req, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  constexpr int kCalls = 45;
  grpc::CompletionQueue cq;
  auto calls = start_gets(*stub, cq, kCalls, "late");
  // The 15 past the peer's 30 are refused at once, saying why.
  int exhausted = 0;
  for (int i = 0; i < kCalls - 30; ++i) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    auto* c = static_cast<WaitingGet*>(tag);
    EXPECT_EQ(c->status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << c->status.error_message();
    if (c->status.error_message().find("the most one host may have waiting") != std::string::npos)
      ++exhausted;
  }
  EXPECT_EQ(exhausted, kCalls - 30);
  // The store still answers everything else, and the 30 when their key comes.
  auto store = make_grpc_store(address_, kToken);
  store->set("other", "v");
  EXPECT_EQ(store->get("other", seconds(1)), "v");
  store->set("late", "here");
  for (int i = 0; i < 30; ++i) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    auto* c = static_cast<WaitingGet*>(tag);
    EXPECT_TRUE(c->status.ok()) << c->status.error_message();
  }
  // Their places are given back: 30 more may wait.
  std::vector<std::future<std::string>> more;
  for (int i = 0; i < 30; ++i)
    more.push_back(
        std::async(std::launch::async, [&] { return store->get("later", seconds(10)); }));
  std::this_thread::sleep_for(milliseconds(300));
  store->set("later", "ok");
  for (auto& f : more) EXPECT_EQ(f.get(), "ok");
}

// Weighed: each waiter counts its key and gRPC's share (kWaiterCost) against
// the waiters' bytes.
TEST_F(RendezvousDoorTest, WaitersPastTheirBytesAreRefused) {
  StoreServiceLimits limits;
  limits.max_waiter_bytes = 3 * StoreServiceLimits::kWaiterCost + 100;
  start(1, 1, limits);
  auto store = make_grpc_store(address_, kToken);
  std::vector<std::future<std::string>> waiting;
  for (int i = 0; i < 3; ++i)
    waiting.push_back(std::async(std::launch::async, [&] { return store->get("k", seconds(10)); }));
  std::this_thread::sleep_for(milliseconds(300));
  try {
    store->get("k", seconds(5));
    ADD_FAILURE() << "a fourth waiter was taken in past the waiters' bytes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bytes, the most the store gives them"), std::string::npos)
        << e.what();
  }
  store->set("k", "v");
  for (auto& f : waiting) EXPECT_EQ(f.get(), "v");
}

}  // namespace
}  // namespace rtd::launcher
