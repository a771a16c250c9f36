// The gRPC store client against dtrun's real server on loopback.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>

#include "launcher/net.h"
#include "launcher/rendezvous_server.h"
#include "rt_dist/error.h"
#include "rt_dist/store.h"
#include "tests/testing/store_contract.h"

namespace rtd::launcher {
namespace {

class GrpcStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<RendezvousServer>(
        ServerOptions{.bind_ip = "127.0.0.1", .port = 0, .token = "secret"});
    address_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  std::unique_ptr<RendezvousServer> server_;
  std::string address_;
};

TEST_F(GrpcStoreTest, FollowsTheStoreContract) {
  auto store = make_grpc_store(address_, "secret");
  testing_util::check_store_contract(*store);
}

TEST_F(GrpcStoreTest, WrongOrMissingTokenIsRejectedAndSaysSo) {
  for (const std::string token : {"wrong", ""}) {
    auto store = make_grpc_store(address_, token);
    try {
      store->set("k", "v");
      ADD_FAILURE() << "expected the server to reject token '" << token << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kConfig);
      EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(make_grpc_store(address_, "secret")->try_get("k").has_value())
      << "a rejected call must not write";
}

TEST_F(GrpcStoreTest, UnreachableServerIsUnavailable) {
  int port = free_port("127.0.0.1");
  auto store = make_grpc_store("127.0.0.1:" + std::to_string(port), "secret");
  try {
    store->set("k", "v");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnavailable) << e.what();
  }
}

// A store whose TCP connections are accepted but never answered (a hung
// server): the bounded view gives up after its limit, with a timeout error.
TEST_F(GrpcStoreTest, BoundedViewGivesUpOnAServerThatNeverAnswers) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 16), 0);  // the kernel completes connections; nobody answers
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto store = make_grpc_store("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)), "secret");
  auto bounded = make_prefix_store("p", store)->bounded(std::chrono::milliseconds(300));
  ASSERT_NE(bounded, nullptr) << "a network store has a bounded view";
  for (auto& attempt : std::vector<std::function<void()>>{
           [&] { bounded->set("k", "v"); }, [&] { bounded->check({"k"}); },
           [&] { bounded->get("k", std::chrono::milliseconds(100)); }}) {
    try {
      attempt();
      ADD_FAILURE() << "expected a timeout";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kTimeout) << e.what();
    }
  }
  close(fd);
}

TEST_F(GrpcStoreTest, BoundedViewIsTheSameStore) {
  auto store = make_grpc_store(address_, "secret");
  auto bounded = make_prefix_store("p", store)->bounded(std::chrono::seconds(5));
  ASSERT_NE(bounded, nullptr);
  bounded->set("k", "v");
  EXPECT_EQ(store->get("p/k", std::chrono::seconds(1)), "v") << "the prefix is kept";
  EXPECT_EQ(bounded->get("k", std::chrono::seconds(1)), "v");
  EXPECT_EQ(make_memory_store()->bounded(std::chrono::seconds(1)), nullptr)
      << "a store without network calls needs no bound";
}

TEST_F(GrpcStoreTest, ServerListensOnlyOnTheGivenAddress) {
  // Bound to 127.0.0.1, the server is not reachable through 127.0.0.2.
  auto store = make_grpc_store("127.0.0.2:" + std::to_string(server_->port()), "secret");
  EXPECT_THROW(store->set("k", "v"), Error);
}

TEST_F(GrpcStoreTest, SecondServerOnTheSamePortFailsClearly) {
  try {
    RendezvousServer second(
        ServerOptions{.bind_ip = "127.0.0.1", .port = server_->port(), .token = "x"});
    FAIL() << "expected the port to be in use";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already in use"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rtd::launcher
