// EtcdClient: the calls dtrun makes to an etcd cluster (etcd's v3 gRPC API,
// proto/etcd.proto): keys, a create-if-absent transaction, leases and one
// watch. Every call tries the cluster's members in turn, starting from the
// last that answered, until one answers or the call's time is up; then it
// throws rtd::Error(kUnavailable) naming the members and what the last said.
// A cluster that lost its quorum answers nothing: its calls time out.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/tls_files.h"

namespace rtd::launcher {

struct EtcdKv {
  std::string key;
  std::string value;
  std::int64_t mod_revision = 0;
  std::int64_t lease = 0;
};

class EtcdClient {
 public:
  // endpoints: "host:port" of the members (at least one); TLS when the
  // files are given (etcd's --client-cert-auth checks this node's
  // certificate). timeout: how long one call may take, every member tried.
  EtcdClient(std::vector<std::string> endpoints, const TlsFiles& tls,
             std::chrono::milliseconds timeout);
  ~EtcdClient();

  // The key's value; *revision (when given) is the store's revision at the read.
  std::optional<EtcdKv> get(const std::string& key, std::int64_t* revision = nullptr);
  std::vector<EtcdKv> get_prefix(const std::string& prefix);
  void put(const std::string& key, const std::string& value, std::int64_t lease = 0);
  // Creates the key when it does not exist; returns whether it did.
  bool create(const std::string& key, const std::string& value, std::int64_t lease = 0);
  // Writes the key when its value is `expected` (nullopt: when it does not
  // exist); returns whether it did. Exactly once, though a reply is lost
  // after the write committed (a deadline, a member lost) and the call is
  // tried again: the transaction also writes a receipt of its own, which
  // the try after an uncertain one looks for when its comparison fails.
  bool put_if(const std::string& key, const std::optional<std::string>& expected,
              const std::string& value, std::int64_t lease = 0);
  // The same with the caller's receipt (receipt_key) holding receipt_value:
  // for a request that is tried again after a call that gave up unsure (etcd
  // too slow to answer within the timeout), which looks for its receipt
  // first. Deleted once the write is known to have committed.
  bool put_if(const std::string& key, const std::optional<std::string>& expected,
              const std::string& value, std::int64_t lease, const std::string& receipt,
              const std::string& receipt_value);
  // The receipt of a request the caller names (request_id: unique to it, the
  // same on each of its tries).
  std::string receipt_key(const std::string& request_id) const;
  // Deletes the key when its value is still `value`; returns whether it did.
  bool remove_if(const std::string& key, const std::string& value);
  // Deletes the key; returns whether it existed.
  bool remove(const std::string& key);
  void remove_prefix(const std::string& prefix);

  // A lease of `ttl` (etcd may lengthen a very short one); returns its id.
  std::int64_t grant(std::chrono::seconds ttl);
  // Renews the lease: the seconds it has left (0 or less: it expired).
  std::int64_t keep_alive(std::int64_t lease);
  void revoke(std::int64_t lease);

  // Waits until the key is written or deleted after `revision`, or `until`;
  // returns whether it changed.
  bool wait_change(const std::string& key, std::int64_t revision,
                   std::chrono::system_clock::time_point until);

  // For tests: asked after each call that succeeded, with what it did
  // ("writing '<key>'"); true drops its reply, as a reply lost after the
  // commit (the caller sees a deadline and tries again).
  void set_fault_hook(std::function<bool(const std::string& what)> hook) {
    fault_hook_ = std::move(hook);
  }

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  std::string describe() const;  // "etcd at h1:2379,h2:2379"

 private:
  struct Stubs;
  // Runs call on a member, trying the others (and it again) until the
  // timeout; *uncertain (when given) says whether a failed try may have
  // been applied all the same (its reply was lost).
  template <typename Call>
  void with_member(const std::string& what, Call&& call, bool* uncertain = nullptr);
  std::string next_receipt();  // a key no other call of any client writes

  std::vector<std::string> endpoints_;
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Stubs>> stubs_;
  std::mutex mu_;
  std::size_t current_ = 0;  // the member that answered last
  const std::string client_id_;
  std::atomic<std::uint64_t> receipts_{0};
  std::function<bool(const std::string&)> fault_hook_;
};

}  // namespace rtd::launcher
