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
#include "runtime/core/store/store_waiters.h"

namespace rtd {

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
  // Refusal of a request naming keys longer than the store keeps (OK: none).
  grpc::Status key_refusal(const std::string& key) const;
  void wake(const std::string& key);  // the Gets waiting for key, after its write
  grpc::Status admit_write(grpc::CallbackServerContext* ctx, const std::string& key);
  template <typename Fn>
  grpc::ServerUnaryReactor* write(grpc::CallbackServerContext* ctx, const std::string& key,
                                  Fn&& body);

  const std::string token_;
  const StoreServiceLimits limits_;
  MemoryStore store_;
  WriteGuard guard_;
  std::function<void(const std::string&)> observer_;
  StoreWaiters waiters_;
  std::mutex mu_;  // stopping_, for the ticker
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread ticker_;
};

}  // namespace rtd
