// Electing the agent that hosts the rounds, through etcd (etcd_hosting.h).
#include "launcher/etcd/etcd_hosting.h"

#include <algorithm>
#include <set>

#include "launcher/etcd/etcd_store.h"
#include "launcher/net.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"

namespace rtd::launcher {
namespace {
// The host key's address while the elected agent starts its server.
constexpr const char* kElecting = "-";
}  // namespace

EtcdHosting::EtcdHosting(EtcdHostingOptions options)
    : o_(std::move(options)), prefix_("/dtrun/" + o_.job + "/") {
  // One call (every member tried) may take half the TTL, at least 2 s: a
  // lease renewed every third of its TTL is then renewed in time.
  const auto timeout = std::max<std::chrono::milliseconds>(
      std::chrono::seconds(2), std::chrono::duration_cast<std::chrono::milliseconds>(o_.ttl) / 2);
  client_ = std::make_shared<EtcdClient>(o_.endpoints, o_.tls, timeout);
  lease_ = std::make_unique<EtcdLease>(*client_, o_.ttl);
  client_->put(prefix_ + "agents/" + o_.node_id, o_.node_addr, lease_->id());
}

EtcdHosting::~EtcdHosting() {
  lease_.reset();  // revoked: this agent's keys (the host key too) go at once
}

std::string EtcdHosting::describe() const { return client_->describe(); }

std::string EtcdHosting::lost() { return lease_->lost(); }

void EtcdHosting::record(const proto::RoundRecord& round) {
  client_->put(prefix_ + "round", round.SerializeAsString());
}

std::shared_ptr<Store> EtcdHosting::job_store(const std::string& run_id) {
  return make_etcd_store(client_, prefix_ + "store/" + run_id + "/");
}

void EtcdHosting::forget_job() {
  client_->remove_prefix(prefix_ + "round");
  client_->remove_prefix(prefix_ + "store/");
}

// The running round to take over, with the members whose presence keys are
// gone; none for a new job, or for a record left by an earlier job under the
// same --rdzv-id (none of its members is here).
std::optional<ResumeFrom> EtcdHosting::resume_point() {
  std::optional<EtcdKv> kv = client_->get(prefix_ + "round");
  if (!kv) return std::nullopt;
  ResumeFrom resume;
  if (!resume.record.ParseFromString(kv->value) || resume.record.round() < 0) {
    log::get("launcher")
        ->warn("{}: the job's round record is unreadable; starting afresh", describe());
    client_->remove_if(prefix_ + "round", kv->value);
    return std::nullopt;
  }
  const std::string agents = prefix_ + "agents/";
  std::set<std::string> here;
  for (const EtcdKv& a : client_->get_prefix(agents)) here.insert(a.key.substr(agents.size()));
  bool any = false;
  for (const auto& m : resume.record.members()) {
    if (here.count(m.node_id())) {
      any = true;
    } else {
      resume.lost[m.node_id()] =
          "was lost: its dtrun's lease in etcd ended (it was killed, or cut off from etcd for "
          "--heartbeat-timeout)";
    }
  }
  if (!any) {
    client_->remove_if(prefix_ + "round", kv->value);
    return std::nullopt;
  }
  return resume;
}

std::string EtcdHosting::find_host(const std::string& gone, SystemTime until,
                                   const StartServer& start,
                                   std::unique_ptr<RendezvousServer>* server) {
  auto logger = log::get("launcher");
  const std::string key = prefix_ + "host";
  for (;;) {
    if (std::string why = lost(); !why.empty())
      throw Error(ErrorCategory::kUnavailable, "this node lost its lease in etcd: " + why);
    if (std::chrono::system_clock::now() >= until)
      throw Error(ErrorCategory::kTimeout,
                  describe() + ": no agent hosted the job's rounds within --rdzv-timeout" +
                      (gone.empty() ? "" : " (the last host, at " + gone + ", was lost)"));
    std::int64_t revision = 0;
    if (std::optional<EtcdKv> host = client_->get(key, &revision)) {
      const std::string address = host->value.substr(0, host->value.find(' '));
      if (address != kElecting) {
        try {
          parse_etcd_endpoints(address);  // one HOST:PORT
        } catch (const Error&) {
          throw Error(ErrorCategory::kConfig,
                      describe() + ": the job's host key " + key + " holds '" +
                          host->value.substr(0, 80) +
                          "', not the ADDRESS:PORT an agent writes: another program writes "
                          "under /dtrun/" +
                          o_.job + "/; give this job another --rdzv-id");
        }
      }
      if (address != gone && address != kElecting) return address;
      // The lost host's key goes with its lease, and an elected one says
      // where it listens a moment after: wait for either.
      client_->wait_change(
          key, revision,
          std::min(until, std::chrono::system_clock::now() + std::chrono::seconds(1)));
      continue;
    }
    // Elected first, then started: the others see who while it starts.
    if (!client_->create(key, std::string(kElecting) + " " + o_.node_id, lease_->id())) continue;
    std::optional<ResumeFrom> resume;
    std::unique_ptr<RendezvousServer> mine;
    std::string address;
    try {
      resume = resume_point();
      // A new job: what an earlier one under this --rdzv-id left in its
      // store (it failed, or was killed) is nobody's.
      if (!resume) client_->remove_prefix(prefix_ + "store/");
      mine = start(resume);
      address = join_host_port(o_.node_addr, mine->port());
      client_->put(key, address + " " + o_.node_id, lease_->id());
    } catch (const Error&) {
      // Another agent may host: this one gives the key back.
      client_->remove_if(key, std::string(kElecting) + " " + o_.node_id);
      throw;
    }
    if (resume)
      logger->info(
          "elected to host the job's rounds at {}: taking over round {} ({} of its {} "
          "node(s) lost)",
          address, resume->record.round(), resume->lost.size(), resume->record.members_size());
    else
      logger->info("elected to host the job's rounds at {}", address);
    *server = std::move(mine);
    return address;
  }
}

}  // namespace rtd::launcher
