// PortHold: the port handed to workers as MASTER_PORT stays out of every
// other bind on this host while it is held (dtrun's own server binds port 0
// then), and is free again once let go.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "launcher/net.h"

namespace rtd::launcher {
namespace {

// Binds a socket with SO_REUSEADDR, as servers do, to 127.0.0.1:port (0: any);
// returns its fd and the port bound, or fd -1.
std::pair<int, int> bind_local(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return {-1, 0};
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return {fd, ntohs(addr.sin_port)};
}

TEST(PortHold, NoOtherBindGetsTheHeldPortAndItIsFreeOnceLetGo) {
  int held = 0;
  {
    PortHold hold("127.0.0.1");
    held = hold.port();
    ASSERT_GT(held, 0);
    EXPECT_EQ(bind_local(held).first, -1) << "a server's bind took the held port";
    std::vector<int> fds;
    for (int i = 0; i < 500; ++i) {  // port 0, as dtrun's one-node server binds
      auto [fd, port] = bind_local(0);
      ASSERT_GE(fd, 0);
      EXPECT_NE(port, held) << "the kernel handed out the held port";
      fds.push_back(fd);
    }
    for (int fd : fds) close(fd);
  }
  auto [fd, port] = bind_local(held);
  EXPECT_GE(fd, 0) << "the port is still taken after the hold ended";
  EXPECT_EQ(port, held);
  if (fd >= 0) close(fd);
}

}  // namespace
}  // namespace rtd::launcher
