// The Store service of the control plane's gRPC server: every call checked
// against the job token, served from a MemoryStore. dtrun's rendezvous server
// and StoreServer (a store alone, for jobs started without dtrun) register it.
//
// Through gRPC's callback API: a Get that waits for its key holds no server
// thread, only an entry among the waiters, woken by the write of its key or
// by the service's own ticker at its deadline; thousands wait at the cost of
// their memory. Every request is bounded (StoreLimits, a waiters' cap, the
// timeout clamped) and refused for its caller alone.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous.grpc.pb.h"
#include "rt_dist/error.h"
#include "runtime/core/secrets_equal.h"
#include "runtime/core/store/memory_store.h"

namespace rtd {

// The bounds of the job's store on the port (docs/dtrun.md, "Limits").
struct StoreServiceLimits {
  StoreLimits store{.max_keys = 262144,
                    .max_bytes = 256u << 20,
                    .max_key_bytes = 4096,
                    .max_value_bytes = (4u << 20) - (64u << 10)};
  // Gets waiting at once: counted, and weighed (their keys, and what gRPC
  // holds for a call: kWaiterCost), in all and per peer host, so that no
  // client (a worker, or anyone without a token) can grow the host's memory
  // past them or take every place.
  std::size_t max_waiters = 16384;
  std::size_t max_waiter_bytes = 256u << 20;
  std::size_t max_waiters_per_peer = 4096;
  std::chrono::milliseconds max_wait{24 * 3600 * 1000};  // a Get's timeout_ms, clamped
  std::size_t max_check_keys = 4096;                     // keys of one Check
  // What one waiting Get costs the host besides its key: gRPC's call state,
  // the request and the reply (about 20-29 KB were seen with 66,000 waits).
  static constexpr std::size_t kWaiterCost = 24u << 10;
};
// The largest message a server of the control plane takes.
inline constexpr int kMaxControlMessageBytes = 4 << 20;
// The memory gRPC itself may use on a server of the control plane (its
// buffers and calls; the store's keys and the waiters are bounded above).
inline constexpr std::size_t kControlServerMemory = std::size_t{1} << 30;
// The bounds every server of the control plane is built with: message size, gRPC's memory.
void bound_control_server(grpc::ServerBuilder& builder);

// OK when the call carries `token`; UNAUTHENTICATED or PERMISSION_DENIED otherwise.
grpc::Status check_token(grpc::ServerContextBase* ctx, const std::string& token);
grpc::Status to_status(const Error& e);
// Runs body, converting rtd::Error (and anything else it throws) to a status.
template <typename Fn>
grpc::Status status_of(Fn&& body) {
  try {
    body();
    return grpc::Status::OK;
  } catch (const Error& e) {
    return to_status(e);
  } catch (const std::exception& e) {
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  }
}

class StoreService final : public proto::Store::CallbackService {
 public:
  // May refuse a write of `key` (the rendezvous host keeps the agents' keys
  // to its agents); OK lets it through.
  using WriteGuard = std::function<grpc::Status(grpc::ServerContextBase*, const std::string& key)>;

  explicit StoreService(std::string token, StoreServiceLimits limits = {});
  ~StoreService() override;

  grpc::ServerUnaryReactor* Set(grpc::CallbackServerContext* ctx, const proto::SetRequest* req,
                                proto::SetResponse*) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const proto::GetRequest* req,
                                proto::GetResponse* resp) override;
  grpc::ServerUnaryReactor* Add(grpc::CallbackServerContext* ctx, const proto::AddRequest* req,
                                proto::AddResponse* resp) override;
  grpc::ServerUnaryReactor* CompareSet(grpc::CallbackServerContext* ctx,
                                       const proto::CompareSetRequest* req,
                                       proto::CompareSetResponse* resp) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* ctx,
                                   const proto::DeleteRequest* req,
                                   proto::DeleteResponse* resp) override;
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const proto::CheckRequest* req,
                                  proto::CheckResponse* resp) override;

  // The keys themselves, for a service in the same server (the rendezvous's heartbeats).
  MemoryStore& memory() { return store_; }
  // Set before the server starts.
  void set_write_guard(WriteGuard guard) { guard_ = std::move(guard); }
  // Called after every write, as MemoryStore::set_observer (the store's own
  // observer is the service's, which wakes the waiting Gets).
  void set_observer(std::function<void(const std::string&)> observer) {
    observer_ = std::move(observer);
  }
  // Answers every waiting Get (the server shuts down); later ones are refused.
  void cancel_waits();
  std::size_t waiting();

 private:
  struct Waiter {
    grpc::CallbackServerContext* ctx;
    grpc::ServerUnaryReactor* reactor;
    proto::GetResponse* response;
    std::string key;
    std::string peer;  // its host (the peer's address without the port)
    std::chrono::steady_clock::time_point since;
    std::chrono::steady_clock::time_point until;
    std::size_t weight() const { return key.size() + StoreServiceLimits::kWaiterCost; }
  };
  // Refusal of a request naming keys longer than the store keeps (OK: none).
  grpc::Status key_refusal(const std::string& key) const;
  // Whether one more waiter fits (mu_ held); the refusal if not.
  grpc::Status admit_waiter_locked(const Waiter& w) const;
  void forget_waiter_locked(const Waiter& w);  // its weight and place given back
  // Gives memory freed by many waiters back to the system.
  static void trim_after(std::size_t released);
  grpc::Status admit_write(grpc::CallbackServerContext* ctx, const std::string& key);
  template <typename Fn>
  grpc::ServerUnaryReactor* write(grpc::CallbackServerContext* ctx, const std::string& key,
                                  Fn&& body);
  void wake(const std::string& key);
  void expire();

  const std::string token_;
  const StoreServiceLimits limits_;
  MemoryStore store_;
  WriteGuard guard_;
  std::function<void(const std::string&)> observer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<std::string, Waiter> waiters_;
  std::size_t waiter_bytes_ = 0;                // their weight (mu_)
  std::map<std::string, std::size_t> by_peer_;  // waiters per peer host (mu_)
  bool stopping_ = false;
  std::thread ticker_;
};

}  // namespace rtd
