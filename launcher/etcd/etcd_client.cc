// The etcd client (etcd_client.h): one channel per member, calls tried member by member.
#include "launcher/etcd/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "etcd.grpc.pb.h"
#include "launcher/net.h"
#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/core/store/tls.h"

namespace rtd::launcher {
namespace {

using Clock = std::chrono::system_clock;

// The end of the range of keys that start with `prefix` (etcd's convention:
// the prefix with its last byte below 0xff raised by one).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// Worth trying another member (or this one again): anything but a refusal
// of the request itself. A member without a leader answers with several
// codes ("context deadline exceeded", "request timed out", "no leader").
bool try_another(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::FAILED_PRECONDITION:
      return false;
    default:
      return true;
  }
}

// Where put_if's receipts live: outside every job's keys; each is deleted
// once its call returned (or goes with its lease).
constexpr const char* kReceipts = "/dtrun-receipts/";

EtcdKv to_kv(const etcdserverpb::KeyValue& kv) {
  return EtcdKv{kv.key(), kv.value(), kv.mod_revision(), kv.lease()};
}

}  // namespace

struct EtcdClient::Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch;
};

EtcdClient::EtcdClient(std::vector<std::string> endpoints, const TlsFiles& tls,
                       std::chrono::milliseconds timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout), client_id_(random_token()) {
  if (endpoints_.empty()) throw Error(ErrorCategory::kConfig, "etcd: no member given");
  grpc::ChannelArguments args;
  // A member that comes back is tried again within a second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // --tls-peer-names pins the nodes' certificates; etcd's members are checked
  // against the CA and the address dialled, as without it.
  TlsFiles members_tls = tls;
  members_tls.peer_names.clear();
  for (const std::string& e : endpoints_) {
    auto s = std::make_unique<Stubs>();
    s->channel = grpc::CreateCustomChannel(e, channel_credentials(members_tls), args);
    s->kv = etcdserverpb::KV::NewStub(s->channel);
    s->lease = etcdserverpb::Lease::NewStub(s->channel);
    s->watch = etcdserverpb::Watch::NewStub(s->channel);
    stubs_.push_back(std::move(s));
  }
}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::describe() const {
  std::string s = "etcd at ";
  for (std::size_t i = 0; i < endpoints_.size(); ++i) s += (i ? "," : "") + endpoints_[i];
  return s;
}

std::string EtcdClient::next_receipt() {
  return kReceipts + client_id_ + "/" + std::to_string(receipts_.fetch_add(1) + 1);
}

template <typename Call>
void EtcdClient::with_member(const std::string& what, Call&& call, bool* uncertain) {
  const auto until = Clock::now() + timeout_;
  // Each member gets its share of the time, at least 300 ms, so that one
  // that hangs (partitioned, or without a leader) leaves time for the others.
  const auto share = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(300), timeout_ / static_cast<int>(stubs_.size()));
  std::size_t member;
  {
    std::lock_guard<std::mutex> lock(mu_);
    member = current_;
  }
  grpc::Status last;
  for (std::size_t tries = 0;; ++tries) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::min(until, Clock::now() + share));
    last = call(*stubs_[member], ctx);
    if (last.ok() && fault_hook_ && fault_hook_(what))
      last = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "reply dropped (fault hook)");
    if (last.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      current_ = member;
      return;
    }
    if (!try_another(last))
      throw Error(ErrorCategory::kConfig, describe() + ": " + what + " was refused by member " +
                                              endpoints_[member] + ": " + last.error_message());
    // Anything but a refusal may have reached the cluster and committed
    // (a deadline, a connection lost after the request was sent).
    if (uncertain) *uncertain = true;
    if (Clock::now() >= until) break;
    member = (member + 1) % stubs_.size();
    // Every member refused at once (all down): wait a little before the next pass.
    if ((tries + 1) % stubs_.size() == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw Error(ErrorCategory::kUnavailable,
              describe() + ": " + what + ": no member answered within " +
                  std::to_string(timeout_.count()) +
                  " ms (the members are down or unreachable, or the cluster lost its quorum); "
                  "last: " +
                  (last.error_message().empty() ? std::string("no answer") : last.error_message()));
}

std::optional<EtcdKv> EtcdClient::get(const std::string& key, std::int64_t* revision) {
  etcdserverpb::RangeRequest req;
  req.set_key(key);
  etcdserverpb::RangeResponse resp;
  with_member("reading '" + key + "'",
              [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->Range(&ctx, req, &resp); });
  if (revision) *revision = resp.header().revision();
  if (resp.kvs_size() == 0) return std::nullopt;
  return to_kv(resp.kvs(0));
}

std::vector<EtcdKv> EtcdClient::get_prefix(const std::string& prefix) {
  etcdserverpb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(prefix_end(prefix));
  etcdserverpb::RangeResponse resp;
  with_member("reading '" + prefix + "*'",
              [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->Range(&ctx, req, &resp); });
  std::vector<EtcdKv> out;
  for (const auto& kv : resp.kvs()) out.push_back(to_kv(kv));
  return out;
}

void EtcdClient::put(const std::string& key, const std::string& value, std::int64_t lease) {
  etcdserverpb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  etcdserverpb::PutResponse resp;
  with_member("writing '" + key + "'",
              [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->Put(&ctx, req, &resp); });
}

bool EtcdClient::create(const std::string& key, const std::string& value, std::int64_t lease) {
  return put_if(key, std::nullopt, value, lease);
}

std::string EtcdClient::receipt_key(const std::string& request_id) const {
  return kReceipts + client_id_ + "/request/" + request_id;
}

bool EtcdClient::put_if(const std::string& key, const std::optional<std::string>& expected,
                        const std::string& value, std::int64_t lease) {
  return put_if(key, expected, value, lease, next_receipt(), key);
}

bool EtcdClient::put_if(const std::string& key, const std::optional<std::string>& expected,
                        const std::string& value, std::int64_t lease, const std::string& receipt,
                        const std::string& receipt_value) {
  etcdserverpb::TxnRequest req;
  auto* cmp = req.add_compare();
  cmp->set_key(key);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  if (expected) {
    cmp->set_target(etcdserverpb::Compare::VALUE);
    cmp->set_value(*expected);
  } else {
    cmp->set_target(etcdserverpb::Compare::CREATE);
    cmp->set_create_revision(0);  // absent
  }
  auto* put = req.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  // The receipt: written with the key, in the same transaction. A try that
  // follows one whose reply was lost finds its comparison failing against
  // its own write; the receipt tells it so (a value alone cannot: another
  // writer may have written the same one, or written after it).
  auto* mark = req.add_success()->mutable_request_put();
  mark->set_key(receipt);
  mark->set_value(receipt_value);
  mark->set_lease(lease);
  etcdserverpb::TxnResponse resp;
  bool uncertain = false;
  with_member(
      "writing '" + key + "'",
      [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->Txn(&ctx, req, &resp); }, &uncertain);
  bool succeeded = resp.succeeded();
  if (!succeeded && uncertain && get(receipt).has_value()) succeeded = true;
  if (succeeded) {
    try {
      remove(receipt);
    } catch (const Error& e) {  // the write stands; only its receipt is left behind
      log::get("etcd")->warn("{}: could not delete the receipt {}: {}", describe(), receipt,
                             e.what());
    }
  }
  return succeeded;
}

bool EtcdClient::remove_if(const std::string& key, const std::string& value) {
  etcdserverpb::TxnRequest req;
  auto* cmp = req.add_compare();
  cmp->set_key(key);
  cmp->set_target(etcdserverpb::Compare::VALUE);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_value(value);
  req.add_success()->mutable_request_delete_range()->set_key(key);
  etcdserverpb::TxnResponse resp;
  with_member("deleting '" + key + "'",
              [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->Txn(&ctx, req, &resp); });
  return resp.succeeded();
}

bool EtcdClient::remove(const std::string& key) {
  etcdserverpb::DeleteRangeRequest req;
  req.set_key(key);
  etcdserverpb::DeleteRangeResponse resp;
  with_member("deleting '" + key + "'", [&](Stubs& s, grpc::ClientContext& ctx) {
    return s.kv->DeleteRange(&ctx, req, &resp);
  });
  return resp.deleted() > 0;
}

void EtcdClient::remove_prefix(const std::string& prefix) {
  etcdserverpb::DeleteRangeRequest req;
  req.set_key(prefix);
  req.set_range_end(prefix_end(prefix));
  etcdserverpb::DeleteRangeResponse resp;
  with_member("deleting '" + prefix + "*'", [&](Stubs& s, grpc::ClientContext& ctx) {
    return s.kv->DeleteRange(&ctx, req, &resp);
  });
}

std::int64_t EtcdClient::grant(std::chrono::seconds ttl) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(ttl.count());
  etcdserverpb::LeaseGrantResponse resp;
  with_member("granting a lease", [&](Stubs& s, grpc::ClientContext& ctx) {
    return s.lease->LeaseGrant(&ctx, req, &resp);
  });
  if (!resp.error().empty() || resp.id() == 0)
    throw Error(ErrorCategory::kUnavailable,
                describe() + ": granting a lease failed: " + resp.error());
  return resp.id();
}

std::int64_t EtcdClient::keep_alive(std::int64_t lease) {
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse resp;
  with_member("renewing the lease", [&](Stubs& s, grpc::ClientContext& ctx) {
    auto stream = s.lease->LeaseKeepAlive(&ctx);
    if (stream->Write(req) && stream->WritesDone() && stream->Read(&resp)) {
      ctx.TryCancel();  // one renewal per call: the stream is done
      stream->Finish();
      return grpc::Status::OK;
    }
    return stream->Finish();
  });
  return resp.ttl();
}

void EtcdClient::revoke(std::int64_t lease) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseRevokeResponse resp;
  with_member("revoking the lease", [&](Stubs& s, grpc::ClientContext& ctx) {
    return s.lease->LeaseRevoke(&ctx, req, &resp);
  });
}

bool EtcdClient::wait_change(const std::string& key, std::int64_t revision,
                             Clock::time_point until) {
  std::size_t member;
  {
    std::lock_guard<std::mutex> lock(mu_);
    member = current_;
  }
  etcdserverpb::WatchRequest req;
  req.mutable_create_request()->set_key(key);
  req.mutable_create_request()->set_start_revision(revision + 1);
  while (Clock::now() < until) {
    grpc::ClientContext ctx;
    ctx.set_deadline(until);
    auto stream = stubs_[member]->watch->Watch(&ctx);
    etcdserverpb::WatchResponse resp;
    if (stream->Write(req)) {
      while (stream->Read(&resp)) {
        if (resp.events_size() > 0 || resp.compact_revision() > 0) {
          ctx.TryCancel();
          stream->Finish();
          return true;  // changed (or so long ago that etcd compacted it away)
        }
        if (resp.canceled()) break;
      }
    }
    grpc::Status status = stream->Finish();
    if (Clock::now() >= until) break;
    if (!try_another(status) && !status.ok())
      throw Error(ErrorCategory::kConfig,
                  describe() + ": watching '" + key + "' was refused: " + status.error_message());
    member = (member + 1) % stubs_.size();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace rtd::launcher
