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
  std::size_t max_waiters = 65536;                       // Gets waiting at once
  std::chrono::milliseconds max_wait{24 * 3600 * 1000};  // a Get's timeout_ms, clamped
  std::size_t max_check_keys = 4096;                     // keys of one Check
};
// The largest message a server of the control plane takes.
inline constexpr int kMaxControlMessageBytes = 4 << 20;

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
    std::chrono::steady_clock::time_point since;
    std::chrono::steady_clock::time_point until;
  };
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
  bool stopping_ = false;
  std::thread ticker_;
};

}  // namespace rtd
