// rendezvous_scale: N simulated agents against dtrun's real rendezvous server.
//  1. join-to-start: N Join calls, issued at once over the real gRPC protocol
//     (asynchronously, over a few connections), until the last layout arrives;
//  2. heartbeats: for a few seconds, the store calls every agent makes each
//     kPeerPoll (two checks and its heartbeat add) and node 0's scan of every
//     node's counter, at the agent's interval; the server's CPU time over that
//     window, as a fraction of one core.
// The server runs in a child process, so that its CPU time is its own; the
// child execs this program again (--serve), since gRPC does not survive a fork
// of a process that has used it.
//   rendezvous_scale --agents 1024,4096,16384 --connections 32 --heartbeat-s 5
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/rendezvous_server.h"
#include "rendezvous.grpc.pb.h"
#include "runtime/core/store/grpc_status.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kToken = "bench";
constexpr const char* kFingerprint = "max_restarts=0";
constexpr std::chrono::milliseconds kPeerPoll{500};  // launcher/agent.cc's interval

std::vector<int> counts(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// The child: a rendezvous server for n nodes; writes its port, then serves
// until killed.
[[noreturn]] void serve(int n, int port_pipe) {
  rtd::launcher::RendezvousServer server(rtd::launcher::ServerOptions{.bind_ip = "127.0.0.1",
                                                                      .port = 0,
                                                                      .token = kToken,
                                                                      .nnodes = n,
                                                                      .nproc_per_node = 1,
                                                                      .fingerprint = kFingerprint,
                                                                      .master_port = 1});
  const int port = server.port();
  if (write(port_pipe, &port, sizeof(port)) != sizeof(port)) _exit(1);
  close(port_pipe);
  for (;;) pause();
}

// CPU seconds (user + system) a process has used so far.
double cpu_seconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string skip;
  for (int i = 0; i < 11; ++i) fields >> skip;  // state ... cmajflt
  long long utime = 0, stime = 0;
  fields >> utime >> stime;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct Channels {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  Channels(const std::string& address, int count) {
    for (int i = 0; i < count; ++i) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection each
      args.SetInt("bench.channel", i);
      channels.push_back(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
    }
  }
  std::shared_ptr<grpc::Channel> operator[](int i) const { return channels[i % channels.size()]; }
};

struct Pending {
  grpc::ClientContext ctx;
  grpc::Status status;
  rtd::proto::JoinResponse response;
  std::unique_ptr<grpc::ClientAsyncResponseReader<rtd::proto::JoinResponse>> reader;
};

// Every agent joins at once; returns seconds until the last layout arrived,
// or a negative value (with the reason printed) when the round failed.
double join_all(const Channels& channels, int n) {
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<rtd::proto::Rendezvous::Stub>> stubs;
  for (const auto& ch : channels.channels) stubs.push_back(rtd::proto::Rendezvous::NewStub(ch));
  std::vector<std::unique_ptr<Pending>> calls;
  const auto start = Clock::now();
  for (int a = 0; a < n; ++a) {
    auto p = std::make_unique<Pending>();
    p->ctx.AddMetadata(rtd::kTokenMetadataKey, kToken);
    p->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
    rtd::proto::JoinRequest req;
    req.set_host("10." + std::to_string(a / 65536) + "." + std::to_string(a / 256 % 256) + "." +
                 std::to_string(a % 256));
    req.set_nproc_per_node(1);
    req.set_nnodes(n);
    req.set_node_rank(a == 0 ? 0 : -1);
    req.set_fingerprint(kFingerprint);
    p->reader = stubs[a % stubs.size()]->AsyncJoin(&p->ctx, req, &cq);
    p->reader->Finish(&p->response, &p->status, p.get());
    calls.push_back(std::move(p));
  }
  std::set<int> ranks;
  for (int done = 0; done < n; ++done) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) return -1;
    auto* p = static_cast<Pending*>(tag);
    if (!p->status.ok()) {
      std::fprintf(stderr, "join failed: %s\n", p->status.error_message().c_str());
      return -1;
    }
    ranks.insert(p->response.node_rank());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (static_cast<int>(ranks.size()) != n) {
    std::fprintf(stderr, "the round handed out %zu distinct node ranks for %d agents\n",
                 ranks.size(), n);
    return -1;
  }
  return seconds;
}

// The store calls of n agents for `seconds`, each at the agent's interval:
// agents 1..n-1 check two keys and add to their heartbeat; node 0 adds 0 to
// every node's counter. Returns the calls made.
long long heartbeats(const Channels& channels, int n, double seconds) {
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<rtd::proto::Store::Stub>> stubs;
  for (const auto& ch : channels.channels) stubs.push_back(rtd::proto::Store::NewStub(ch));
  struct Call {
    grpc::ClientContext ctx;
    grpc::Status status;
    rtd::proto::AddResponse add;
    rtd::proto::CheckResponse check;
    std::unique_ptr<grpc::ClientAsyncResponseReader<rtd::proto::AddResponse>> add_reader;
    std::unique_ptr<grpc::ClientAsyncResponseReader<rtd::proto::CheckResponse>> check_reader;
  };
  long long issued = 0, finished = 0;
  auto issue_add = [&](int a, const std::string& key, long long delta) {
    auto* c = new Call;
    c->ctx.AddMetadata(rtd::kTokenMetadataKey, kToken);
    rtd::proto::AddRequest req;
    req.set_key(key);
    req.set_delta(delta);
    c->add_reader = stubs[a % stubs.size()]->AsyncAdd(&c->ctx, req, &cq);
    c->add_reader->Finish(&c->add, &c->status, c);
    ++issued;
  };
  auto issue_check = [&](int a, const std::string& key) {
    auto* c = new Call;
    c->ctx.AddMetadata(rtd::kTokenMetadataKey, kToken);
    rtd::proto::CheckRequest req;
    req.add_keys(key);
    c->check_reader = stubs[a % stubs.size()]->AsyncCheck(&c->ctx, req, &cq);
    c->check_reader->Finish(&c->check, &c->status, c);
    ++issued;
  };
  auto drain = [&](bool block) {
    void* tag = nullptr;
    bool ok = false;
    for (;;) {
      auto deadline = block ? std::chrono::system_clock::now() + std::chrono::seconds(30)
                            : std::chrono::system_clock::now();
      auto status = cq.AsyncNext(&tag, &ok, deadline);
      if (status != grpc::CompletionQueue::GOT_EVENT) return;
      delete static_cast<Call*>(tag);
      ++finished;
      if (block && finished == issued) return;
    }
  };
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  for (auto tick = Clock::now(); tick < end; tick += kPeerPoll) {
    // Spread each interval's calls over it, as agents started at different times do.
    const auto slice = kPeerPoll / n;
    for (int a = 0; a < n; ++a) {
      std::this_thread::sleep_until(tick + slice * a);
      if (a == 0) {
        for (int node = 1; node < n; ++node)
          issue_add(0, "dtrun/heartbeat/" + std::to_string(node), 0);
      } else {
        issue_check(a, "dtrun/failed");
        issue_check(a, "dtrun/attempt0/failed");
        issue_add(a, "dtrun/heartbeat/" + std::to_string(a), 1);
      }
      drain(false);
    }
  }
  if (finished < issued) drain(true);
  return issued;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--serve") serve(std::stoi(argv[2]), std::stoi(argv[3]));
  std::vector<int> agents{1024, 4096};
  int connections = 32;
  double heartbeat_s = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--agents")
      agents = counts(v);
    else if (f == "--connections")
      connections = std::stoi(v);
    else if (f == "--heartbeat-s")
      heartbeat_s = std::stod(v);
    else {
      std::fprintf(stderr,
                   "usage: rendezvous_scale [--agents 1024,4096,16384] [--connections 32] "
                   "[--heartbeat-s 5]\n");
      return 2;
    }
  }
  std::printf("%8s %12s %10s %14s %14s %10s\n", "agents", "join_s", "calls/s", "server_cpu_s",
              "server_core%", "window_s");
  for (const int n : agents) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    const pid_t child = fork();
    if (child == 0) {
      close(fds[0]);
      const std::string nodes = std::to_string(n), fd = std::to_string(fds[1]);
      execl("/proc/self/exe", argv[0], "--serve", nodes.c_str(), fd.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    int port = 0;
    if (read(fds[0], &port, sizeof(port)) != sizeof(port)) {
      std::fprintf(stderr, "the server did not start\n");
      return 1;
    }
    close(fds[0]);
    Channels channels("127.0.0.1:" + std::to_string(port), connections);
    const double join_s = join_all(channels, n);
    const double cpu0 = cpu_seconds(child);
    const auto t0 = Clock::now();
    const long long calls = join_s < 0 ? 0 : heartbeats(channels, n, heartbeat_s);
    const double window = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = cpu_seconds(child) - cpu0;
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    std::printf("%8d %12.3f %10.0f %14.3f %14.1f %10.2f\n", n, join_s, calls / window, cpu,
                100.0 * cpu / window, window);
    std::fflush(stdout);
  }
  return 0;
}
