// Sequences of requests against the rendezvous host's state, as its services
// take them: joins and heartbeats through the door's checks into a real
// Membership (its Rounds), ticks of a clock that moves, calls that close,
// and the store's operations on a bounded MemoryStore. Heartbeats carry a
// secret that a join was really issued, or a made-up one. No input may
// crash, corrupt memory or make a layout that names a rank outside its world.
#include <chrono>
#include <cstdlib>
#include <map>
#include <vector>

#include "launcher/membership.h"
#include "launcher/request_checks.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/store/memory_store.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using rtd::launcher::SystemTime;

void check_layout(const rtd::proto::JoinResponse& l) {
  if (l.nnodes() < 1 || l.node_rank() < 0 || l.node_rank() >= l.nnodes() ||
      l.node().first_rank() + l.node().nproc() > l.world_size() || l.agent_secret().empty())
    std::abort();  // a layout no agent can use: the fuzzer reports it
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rtd;
  using namespace rtd::launcher;
  static const bool quiet = [] {
    log::setup("fuzz", "off");
    return true;
  }();
  (void)quiet;
  fuzz::Input in(data, size);
  const int min_nodes = 1 + in.byte() % 3;
  const int max_nodes = min_nodes + in.byte() % 3;
  SystemTime now = SystemTime{} + std::chrono::hours(1000);
  Membership membership(RoundConfig{.min_nodes = min_nodes,
                                    .max_nodes = max_nodes,
                                    .nproc_per_node = 2,
                                    .fingerprint = "f",
                                    .master_port = 1,
                                    .run_id = "run",
                                    .last_call = std::chrono::milliseconds(500),
                                    .host_node_id = "host"},
                        std::chrono::seconds(3), now);
  MemoryStore store(
      StoreLimits{.max_keys = 64, .max_bytes = 4096, .max_key_bytes = 64, .max_value_bytes = 256});
  std::vector<std::string> secrets;  // those the joins were issued
  auto done = [&](const proto::JoinResponse* layout, const Error*) {
    if (!layout) return;
    check_layout(*layout);
    secrets.push_back(layout->agent_secret());
  };
  while (!in.done()) {
    switch (in.byte() % 7) {
      case 0: {  // a join, as the door takes it
        proto::JoinRequest r;
        if (!r.ParseFromString(in.chunk())) break;
        if (in.byte() & 1) {  // mostly well formed, so that rounds close
          r.set_nnodes(max_nodes);
          r.set_min_nodes(min_nodes);
          r.set_nproc_per_node(2);
          r.set_fingerprint("f");
        }
        if (!malformed_join(r).empty()) break;
        membership.join_async(r, now + std::chrono::seconds(in.byte()), done);
        break;
      }
      case 1: {  // a heartbeat, with a real secret or not
        proto::HeartbeatRequest r;
        if (!r.ParseFromString(in.chunk())) break;
        const std::uint8_t which = in.byte();
        if (!secrets.empty() && which < 200) r.set_agent_secret(secrets[which % secrets.size()]);
        if (!malformed_heartbeat(r).empty()) break;
        membership.heartbeat(r.round(), r.node_rank(), r.agent_secret(),
                             static_cast<NodeState>(r.state() % 3), now);
        break;
      }
      case 2:  // time passes
        now += std::chrono::milliseconds(100 * in.byte());
        membership.tick(now);
        break;
      case 3:  // a held call closes
        membership.call_closed(in.byte() % 4, in.byte() % 8, now, now);
        break;
      case 4: {  // the store
        const std::uint8_t op = in.byte();
        const std::string key = in.chunk(), value = in.chunk();
        try {
          switch (op % 5) {
            case 0:
              store.set(key, value);
              break;
            case 1:
              store.add(key, static_cast<std::int64_t>(in.u32()) << (in.byte() % 40));
              break;
            case 2:
              store.compare_set(key, value, in.chunk());
              break;
            case 3:
              store.remove(key);
              break;
            default:
              store.try_get(key);
              break;
          }
        } catch (const Error&) {
        }
        if (store.keys() > 64 || store.bytes() > 4096) std::abort();  // past its quota
        break;
      }
      case 5:
        membership.peek(in.byte() % 4, in.byte() % 8);
        membership.is_member_secret(in.chunk());
        break;
      default:
        if (in.byte() == 0xff) membership.cancel("fuzz");
        break;
    }
  }
  return 0;
}
