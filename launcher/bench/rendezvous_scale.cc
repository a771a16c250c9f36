// rendezvous_scale: N simulated agents against dtrun's real rendezvous server.
//  1. join-to-start: N Join calls, issued at once over the real gRPC protocol
//     (asynchronously, over a few connections), until the last layout arrives;
//  2. heartbeats: for a few seconds, the Heartbeat call every agent keeps
//     open (launcher/heartbeats.h), held by the server for heartbeat_hold()
//     and sent again, watching the two failure keys an agent watches; the
//     server's CPU time over that window, as a fraction of one core.
// The server runs in a child process, so that its CPU time is its own; the
// child execs this program again (--serve), since gRPC does not survive a fork
// of a process that has used it.
// With --waiting-gets N, N store Gets of a key nobody sets (each with a
// distinct 256-byte key, waiting up to an hour) are sent before the
// heartbeat window and kept waiting through it, as a hostile client would:
// how many the host took (the rest it refuses at its bounds), whether the
// heartbeats were still answered, and the host's resident memory then.
// With --etcd HOST:PORT (the etcd backend), each agent first does what an
// agent does in etcd before it joins (a lease, its presence key, the host
// key read), and through the heartbeat window renews its lease every third
// of the TTL, as EtcdLease does; with --etcd-pid, etcd's CPU time for that.
//   rendezvous_scale --agents 1024,4096,16384 --connections 32 --heartbeat-s 5
//   rendezvous_scale --agents 1024 --etcd 127.0.0.1:2379 --etcd-pid $(pgrep etcd)
//   rendezvous_scale --agents 1024 --heartbeat-s 30 --waiting-gets 20000
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/etcd/etcd_client.h"
#include "launcher/heartbeats.h"
#include "launcher/rendezvous_server.h"
#include "rendezvous.grpc.pb.h"
#include "runtime/core/store/grpc_status.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kToken = "bench";
constexpr const char* kFingerprint = "max_restarts=0";
constexpr std::chrono::seconds kTimeout{30};  // dtrun's default --heartbeat-timeout

std::vector<int> counts(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// The child: a rendezvous server for n nodes; writes its port, then serves
// until killed.
[[noreturn]] void serve(int n, int port_pipe) {
  rtd::launcher::RendezvousServer server(
      rtd::launcher::ServerOptions{.bind_ip = "127.0.0.1",
                                   .port = 0,
                                   .token = kToken,
                                   .min_nodes = n,
                                   .max_nodes = n,
                                   .nproc_per_node = 1,
                                   .fingerprint = kFingerprint,
                                   .master_port = 1,
                                   .heartbeat_timeout = kTimeout});
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

// A process's resident memory, in MiB.
double rss_mib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
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
// secrets: each agent's, by the node rank it was given (its heartbeats carry it).
double join_all(const Channels& channels, int n, std::vector<std::string>* secrets) {
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
    req.set_min_nodes(n);
    req.set_node_rank(a == 0 ? 0 : -1);
    req.set_node_id("agent" + std::to_string(a));
    req.set_last_round(-1);
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
    if (p->response.node_rank() >= 0 && p->response.node_rank() < n)
      (*secrets)[p->response.node_rank()] = p->response.agent_secret();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (static_cast<int>(ranks.size()) != n) {
    std::fprintf(stderr, "the round handed out %zu distinct node ranks for %d agents\n",
                 ranks.size(), n);
    return -1;
  }
  return seconds;
}

// The heartbeats of n agents for `seconds`: each keeps one call open, sent
// again as soon as the server answers it (as HeartbeatClient does); the first
// calls are spread over one hold, as agents that started at different times.
// Measures from the end of that first hold to the end of `seconds`: the calls
// answered and the server's CPU time. Every answer must be "nothing new".
struct Steady {
  long long calls = 0;
  double cpu_s = 0;
  double window_s = 0;
};
Steady heartbeats(const Channels& channels, int n, double seconds, pid_t server,
                  const std::vector<std::string>& secrets) {
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<rtd::proto::Rendezvous::Stub>> stubs;
  for (const auto& ch : channels.channels) stubs.push_back(rtd::proto::Rendezvous::NewStub(ch));
  struct Call {
    int agent = 0;
    grpc::ClientContext ctx;
    grpc::Status status;
    rtd::proto::HeartbeatResponse response;
    std::unique_ptr<grpc::ClientAsyncResponseReader<rtd::proto::HeartbeatResponse>> reader;
  };
  const auto hold = rtd::launcher::heartbeat_hold(kTimeout);
  long long outstanding = 0, answered = 0, failed = 0;
  auto issue = [&](int a) {
    auto* c = new Call;
    c->agent = a;
    c->ctx.AddMetadata(rtd::kTokenMetadataKey, kToken);
    c->ctx.set_deadline(std::chrono::system_clock::now() + hold + kTimeout);
    rtd::proto::HeartbeatRequest req;
    req.set_round(0);
    req.set_node_rank(a);
    req.set_agent_secret(secrets[a]);
    req.add_keys("dtrun/failed");
    req.add_keys("dtrun/round0/failed");
    req.set_hold_ms(hold.count());
    c->reader = stubs[a % stubs.size()]->AsyncHeartbeat(&c->ctx, req, &cq);
    c->reader->Finish(&c->response, &c->status, c);
    ++outstanding;
  };
  const auto start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  auto drain = [&](Clock::time_point until, bool again) {
    void* tag = nullptr;
    bool ok = false;
    while (outstanding > 0 &&
           cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + (until - Clock::now())) ==
               grpc::CompletionQueue::GOT_EVENT) {
      auto* c = static_cast<Call*>(tag);
      --outstanding;
      ++answered;
      if (!c->status.ok() || c->response.rejoin() || !c->response.failure().empty()) ++failed;
      if (again && Clock::now() < end) issue(c->agent);
      delete c;
    }
  };
  const auto slice = hold / n;
  for (int a = 0; a < n; ++a) {
    issue(a);
    drain(start + slice * (a + 1), true);
  }
  const long long calls0 = answered;
  const double cpu0 = cpu_seconds(server);
  const auto t0 = Clock::now();
  drain(end, true);
  Steady steady{answered - calls0, cpu_seconds(server) - cpu0,
                std::chrono::duration<double>(Clock::now() - t0).count()};
  drain(end + hold + kTimeout, false);
  if (failed > 0) std::fprintf(stderr, "%lld heartbeats failed or were told to rejoin\n", failed);
  return steady;
}

// n Gets that wait (keys nobody sets) over the channels, cancelled when this goes.
struct WaitingGets {
  struct Call {
    grpc::ClientContext ctx;
    grpc::Status status;
    rtd::proto::GetResponse response;
    std::unique_ptr<grpc::ClientAsyncResponseReader<rtd::proto::GetResponse>> reader;
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<rtd::proto::Store::Stub>> stubs;
  std::vector<std::unique_ptr<Call>> calls;

  WaitingGets(const Channels& channels, int n) {
    for (const auto& ch : channels.channels) stubs.push_back(rtd::proto::Store::NewStub(ch));
    for (int i = 0; i < n; ++i) {
      auto c = std::make_unique<Call>();
      c->ctx.AddMetadata(rtd::kTokenMetadataKey, kToken);
      c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
      rtd::proto::GetRequest req;
      std::string key = "hostile/" + std::to_string(i) + "/";
      key.resize(256, 'k');
      req.set_key(key);
      req.set_timeout_ms(3600 * 1000);
      c->reader = stubs[i % stubs.size()]->AsyncGet(&c->ctx, req, &cq);
      c->reader->Finish(&c->response, &c->status, c.get());
      calls.push_back(std::move(c));
    }
  }
  // The calls answered so far (refused at the host's bounds: none is set).
  int answered(std::chrono::milliseconds within) {
    int n = 0;
    void* tag = nullptr;
    bool ok = false;
    while (cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + within) ==
           grpc::CompletionQueue::GOT_EVENT) {
      ++n;
    }
    return n;
  }
  ~WaitingGets() {  // every call ended and its tag taken before the calls go
    for (auto& c : calls) c->ctx.TryCancel();
    cq.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
    }
  }
};

// The etcd side of n agents, on `threads` threads with a client each.
struct EtcdLoad {
  std::string endpoint;
  std::string prefix;
  std::vector<std::int64_t> leases;  // by agent
  static constexpr int kThreads = 32;

  // What each agent does before its Join: returns the seconds it took them all.
  double join(int n, const std::string& host) {
    leases.assign(n, 0);
    rtd::launcher::EtcdClient setup({endpoint}, {}, std::chrono::seconds(30));
    setup.put(prefix + "host", host + " agent0");
    const auto start = Clock::now();
    run(n, [&](rtd::launcher::EtcdClient& c, int a) {
      leases[a] = c.grant(kTimeout);
      c.put(prefix + "agents/agent" + std::to_string(a), "10.0.0.1", leases[a]);
      if (!c.get(prefix + "host")) throw std::runtime_error("no host key");
    });
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  // Every lease renewed once per third of the TTL for `seconds`: renewals.
  long long renew(double seconds) {
    const int n = static_cast<int>(leases.size());
    std::atomic<long long> renewals{0};
    const auto every = std::chrono::duration<double>(kTimeout.count() / 3.0);
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        rtd::launcher::EtcdClient c({endpoint}, {}, std::chrono::seconds(30));
        const int mine = (n - t + kThreads - 1) / kThreads;
        if (mine == 0) return;
        // Spread over the period, as agents that started at different times.
        const auto gap = std::chrono::duration_cast<Clock::duration>(every / mine);
        auto next = Clock::now() + gap * t / kThreads;
        for (int i = 0; Clock::now() < end; ++i) {
          std::this_thread::sleep_until(next);
          next += gap;
          c.keep_alive(leases[t + (i % mine) * kThreads]);
          ++renewals;
        }
      });
    }
    for (auto& th : threads) th.join();
    return renewals;
  }
  template <typename F>
  void run(int n, F&& f) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        rtd::launcher::EtcdClient c({endpoint}, {}, std::chrono::seconds(30));
        for (int a = t; a < n; a += kThreads) f(c, a);
      });
    }
    for (auto& th : threads) th.join();
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--serve") serve(std::stoi(argv[2]), std::stoi(argv[3]));
  std::vector<int> agents{1024, 4096};
  int connections = 32;
  double heartbeat_s = 30;
  std::string etcd;
  pid_t etcd_pid = 0;
  int waiting_gets = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--etcd")
      etcd = v;
    else if (f == "--etcd-pid")
      etcd_pid = std::stoi(v);
    else if (f == "--agents")
      agents = counts(v);
    else if (f == "--connections")
      connections = std::stoi(v);
    else if (f == "--heartbeat-s")
      heartbeat_s = std::stod(v);
    else if (f == "--waiting-gets")
      waiting_gets = std::stoi(v);
    else {
      std::fprintf(stderr,
                   "usage: rendezvous_scale [--agents 1024,4096,16384] [--connections 32] "
                   "[--heartbeat-s 30] [--waiting-gets N] [--etcd HOST:PORT [--etcd-pid "
                   "PID]]\n");
      return 2;
    }
  }
  std::printf("%8s %12s %10s %14s %14s %10s", "agents", "join_s", "calls/s", "server_cpu_s",
              "server_core%", "window_s");
  if (!etcd.empty()) std::printf(" %10s %12s %12s", "etcd_s", "renewals/s", "etcd_core%");
  if (waiting_gets > 0) std::printf(" %10s %10s %12s", "gets_held", "refused", "server_MiB");
  std::printf("\n");
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
    std::vector<std::string> secrets(n);
    EtcdLoad load{
        etcd, "/dtrun/bench-" + std::to_string(getpid()) + "-" + std::to_string(n) + "/", {}};
    double etcd_s = 0, renewals_per_s = 0, etcd_core = 0;
    if (!etcd.empty()) etcd_s = load.join(n, "127.0.0.1:" + std::to_string(port));
    double join_s = join_all(channels, n, &secrets);
    if (join_s >= 0) join_s += etcd_s;  // an agent joins once it has read the host key
    std::thread renewing;
    if (!etcd.empty() && join_s >= 0) {
      renewing = std::thread([&] {
        const double cpu0 = etcd_pid ? cpu_seconds(etcd_pid) : 0;
        const auto t0 = Clock::now();
        const long long renewals = load.renew(heartbeat_s);
        const double window = std::chrono::duration<double>(Clock::now() - t0).count();
        renewals_per_s = static_cast<double>(renewals) / window;
        if (etcd_pid) etcd_core = 100.0 * (cpu_seconds(etcd_pid) - cpu0) / window;
      });
    }
    std::unique_ptr<WaitingGets> gets;
    int refused = 0;
    if (waiting_gets > 0 && join_s >= 0) {
      gets = std::make_unique<WaitingGets>(channels, waiting_gets);
      refused = gets->answered(std::chrono::milliseconds(3000));  // refusals come at once
    }
    const Steady beats =
        join_s < 0 ? Steady{} : heartbeats(channels, n, heartbeat_s, child, secrets);
    const double server_mib = rss_mib(child);
    if (renewing.joinable()) renewing.join();
    if (!etcd.empty()) {
      rtd::launcher::EtcdClient cleanup({etcd}, {}, std::chrono::seconds(30));
      cleanup.remove_prefix(load.prefix);
      load.run(n, [&](rtd::launcher::EtcdClient& c, int a) { c.revoke(load.leases[a]); });
    }
    const double window = beats.window_s, cpu = beats.cpu_s;
    const double calls = static_cast<double>(beats.calls);
    if (gets) refused += gets->answered(std::chrono::milliseconds(0));
    kill(child, SIGKILL);
    gets.reset();
    waitpid(child, nullptr, 0);
    std::printf("%8d %12.3f %10.0f %14.3f %14.1f %10.2f", n, join_s, calls / window, cpu,
                100.0 * cpu / window, window);
    if (!etcd.empty())
      std::printf(" %10.3f %12.0f %12s", etcd_s, renewals_per_s,
                  etcd_pid ? std::to_string(etcd_core).substr(0, 5).c_str() : "-");
    if (waiting_gets > 0)
      std::printf(" %10d %10d %12.0f", waiting_gets - refused, refused, server_mib);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
