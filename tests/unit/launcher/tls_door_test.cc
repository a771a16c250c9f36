// The TLS door of the rendezvous server (runtime/core/store/tls_door.h): a
// client whose certificate another CA signed is refused at the handshake,
// and the host's log names its address, while a good client's calls go on.
// Certificates are made here with openssl (skipped without it).
#include "runtime/core/store/tls_door.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "launcher/rendezvous_server.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/store/grpc_store.h"

namespace rtd::launcher {
namespace {

namespace fs = std::filesystem;

TEST(TlsDoor, PeerKeysOfGrpcsPeerStrings) {
  EXPECT_EQ(door_peer_key("ipv4:10.0.0.2:4567"), "10.0.0.2:4567");
  EXPECT_EQ(door_peer_key("ipv6:[::1]:80"), "[::1]:80");
  EXPECT_EQ(door_peer_key("ipv6:%5B::1%5D:80"), "[::1]:80");
  EXPECT_EQ(door_peer_key("ipv6:%5B::ffff:10.0.0.2%5D:80"), "10.0.0.2:80");
  EXPECT_EQ(door_peer_key("ipv6:[::ffff:10.0.0.2]:80"), "10.0.0.2:80");
  EXPECT_EQ(door_peer_key("unix:/tmp/socket"), "");
  EXPECT_EQ(door_peer_key(""), "");
}

// A CA and a certificate for 127.0.0.1 signed by it, in dir; false without openssl.
bool make_certs(const fs::path& dir, const std::string& ca, const std::string& cert) {
  const std::string d = dir.string();
  std::ofstream(d + "/ext") << "subjectAltName=IP:127.0.0.1\n"
                               "extendedKeyUsage=serverAuth,clientAuth\n";
  const std::string cmd = "(cd " + d + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " +
                          ca + ".key -out " + ca + ".pem -days 2 -subj /CN=" + ca +
                          " && openssl req -newkey rsa:2048 -nodes -keyout " + cert + ".key -out " +
                          cert + ".csr -subj /CN=" + cert + " && openssl x509 -req -in " + cert +
                          ".csr -CA " + ca + ".pem -CAkey " + ca + ".key -CAcreateserial -out " +
                          cert + ".pem -days 2 -extfile ext) >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

TlsFiles files(const fs::path& dir, const std::string& cert, const std::string& ca) {
  return TlsFiles{.cert = (dir / (cert + ".pem")).string(),
                  .key = (dir / (cert + ".key")).string(),
                  .ca = (dir / (ca + ".pem")).string()};
}

class TlsDoorServer : public testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl";
    dir_ = fs::temp_directory_path() / ("tls_door_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    ASSERT_TRUE(make_certs(dir_, "ca", "node") && make_certs(dir_, "rogue_ca", "rogue"))
        << "openssl could not make the certificates";
    log_ = std::make_shared<spdlog::sinks::ostream_sink_mt>(seen_);
    log::get("tls")->sinks().push_back(log_);
  }
  void TearDown() override {
    if (log_) {
      auto& sinks = log::get("tls")->sinks();
      sinks.erase(std::remove(sinks.begin(), sinks.end(), log_), sinks.end());
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // What the log said, once it says `what` or after 5 s.
  std::string log_once(const std::string& what) {
    for (int i = 0; i < 50 && seen_.str().find(what) == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return seen_.str();
  }
  fs::path dir_;
  std::ostringstream seen_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> log_;
};

TEST_F(TlsDoorServer, ARefusedHandshakeIsLoggedWithThePeersAddress) {
  RendezvousServer server(ServerOptions{
      .bind_ip = "127.0.0.1", .port = 0, .token = "t", .tls = files(dir_, "node", "ca")});
  const std::string address = "127.0.0.1:" + std::to_string(server.port());

  auto good = make_grpc_store(address, "t", "", files(dir_, "node", "ca"));
  good->set("k", "v");
  EXPECT_EQ(good->get("k", std::chrono::milliseconds(5000)), "v");

  auto rogue = make_grpc_store(address, "t", "", files(dir_, "rogue", "ca"));
  EXPECT_THROW(rogue->set("k", "w"), Error);
  const std::string said = log_once("ended before any call");
  EXPECT_NE(said.find("rendezvous: a connection from 127.0.0.1:"), std::string::npos) << said;
  EXPECT_NE(said.find("its TLS handshake was refused"), std::string::npos) << said;
  EXPECT_EQ(good->get("k", std::chrono::milliseconds(5000)), "v") << "the rogue wrote nothing";
}

}  // namespace
}  // namespace rtd::launcher
