// Sequences of requests against the store service itself, as a client on
// the port sends them: through a gRPC server (in process) with the job's
// token or without it, keys of any length, Gets that wait (synchronous, or
// left waiting and cancelled), Checks of many keys. No input may crash,
// corrupt memory, hang, keep more waiters or bytes than the limits allow,
// or let a key longer than the store keeps through any door.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "rendezvous.grpc.pb.h"
#include "runtime/core/log.h"
#include "runtime/core/store/grpc_status.h"
#include "runtime/core/store/store_service.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using namespace rtd;
using std::chrono::milliseconds;

constexpr const char* kToken = "tok";
constexpr std::size_t kMaxKey = 64;

StoreServiceLimits limits() {
  StoreServiceLimits l;
  l.store = StoreLimits{
      .max_keys = 32, .max_bytes = 4096, .max_key_bytes = kMaxKey, .max_value_bytes = 256};
  l.max_waiters = 16;
  l.max_waiter_bytes = 10 * StoreServiceLimits::kWaiterCost;
  l.max_waiters_per_peer = 12;
  l.max_wait = milliseconds(200);
  l.max_check_keys = 16;
  return l;
}

struct Pending {
  grpc::ClientContext ctx;
  grpc::Status status;
  proto::GetResponse response;
  std::unique_ptr<grpc::ClientAsyncResponseReader<proto::GetResponse>> reader;
  std::string key;
};

void check(bool ok) {
  if (!ok) std::abort();  // the fuzzer reports it
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {
    log::setup("fuzz", "off");
    return true;
  }();
  (void)quiet;
  fuzz::Input in(data, size);
  const StoreServiceLimits l = limits();
  StoreService service(kToken, l);
  grpc::ServerBuilder builder;
  bound_control_server(builder);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  check(server != nullptr);
  auto stub = proto::Store::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Pending>> pending;
  auto context = [&](grpc::ClientContext& ctx, bool with_token) {
    if (with_token) ctx.AddMetadata(kTokenMetadataKey, kToken);
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(2000));
  };
  // A key of any length (a chunk, stretched by a repeat count past the limit).
  auto key_of = [&](std::uint8_t stretch) {
    std::string key = in.chunk();
    if (stretch & 0x80 && !key.empty()) key.resize(key.size() * (1 + stretch % 8), key[0]);
    return key;
  };
  // A key past the limit never gets through (the door says INVALID_ARGUMENT;
  // a key that is not UTF-8 protobuf itself refuses first).
  auto refused_if_long = [&](const std::string& key, const grpc::Status& s, bool) {
    if (key.size() > kMaxKey) check(!s.ok());
  };
  int ops = 0;
  while (!in.done() && ++ops < 64) {
    const std::uint8_t op = in.byte();
    const bool with_token = (op & 0x10) == 0;
    grpc::ClientContext ctx;
    context(ctx, with_token);
    switch (op % 8) {
      case 0: {
        proto::SetRequest r;
        r.set_key(key_of(in.byte()));
        r.set_value(in.chunk());
        proto::SetResponse out;
        refused_if_long(r.key(), stub->Set(&ctx, r, &out), with_token);
        break;
      }
      case 1: {
        proto::AddRequest r;
        r.set_key(key_of(in.byte()));
        r.set_delta(static_cast<std::int64_t>(in.u32()) << (in.byte() % 40));
        proto::AddResponse out;
        refused_if_long(r.key(), stub->Add(&ctx, r, &out), with_token);
        break;
      }
      case 2: {
        proto::CompareSetRequest r;
        r.set_key(key_of(in.byte()));
        r.set_expected(in.chunk());
        r.set_desired(in.chunk());
        proto::CompareSetResponse out;
        refused_if_long(r.key(), stub->CompareSet(&ctx, r, &out), with_token);
        break;
      }
      case 3: {
        proto::DeleteRequest r;
        r.set_key(key_of(in.byte()));
        proto::DeleteResponse out;
        refused_if_long(r.key(), stub->Delete(&ctx, r, &out), with_token);
        break;
      }
      case 4: {
        proto::CheckRequest r;
        const int n = in.byte() % 24;
        bool any_long = false;
        for (int i = 0; i < n; ++i) {
          r.add_keys(key_of(in.byte()));
          any_long = any_long || r.keys(i).size() > kMaxKey;
        }
        proto::CheckResponse out;
        const grpc::Status s = stub->Check(&ctx, r, &out);
        if (with_token && (any_long || n > static_cast<int>(l.max_check_keys))) check(!s.ok());
        break;
      }
      case 5: {  // a Get that waits a little, here
        proto::GetRequest r;
        r.set_key(key_of(in.byte()));
        r.set_timeout_ms(in.byte() % 40);
        proto::GetResponse out;
        refused_if_long(r.key(), stub->Get(&ctx, r, &out), with_token);
        break;
      }
      case 6: {  // a Get left waiting (its answer read at the end)
        auto p = std::make_unique<Pending>();
        context(p->ctx, with_token);
        proto::GetRequest r;
        r.set_key(key_of(in.byte()));
        const std::uint8_t t = in.byte();
        r.set_timeout_ms(t == 0xff ? -1 : t == 0xfe ? INT64_MAX : t * 2);
        p->key = r.key();
        p->reader = stub->AsyncGet(&p->ctx, r, &cq);
        p->reader->Finish(&p->response, &p->status, p.get());
        pending.push_back(std::move(p));
        break;
      }
      default:  // a waiting Get given up by its client
        if (!pending.empty()) pending[in.byte() % pending.size()]->ctx.TryCancel();
        break;
    }
    check(service.waiting() <= l.max_waiters);
    check(service.memory().keys() <= l.store.max_keys);
    check(service.memory().bytes() <= l.store.max_bytes);
  }
  // Every waiting Get is answered (by its key, its deadline, its cancel or
  // the shutdown): none is left hanging.
  service.cancel_waits();
  for (std::size_t i = 0; i < pending.size(); ++i) {
    void* tag = nullptr;
    bool ok = false;
    const auto status =
        cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::seconds(10));
    check(status == grpc::CompletionQueue::GOT_EVENT);
    auto* p = static_cast<Pending*>(tag);
    if (p->status.ok()) check(p->key.size() <= kMaxKey);
  }
  check(service.waiting() == 0);
  server->Shutdown(std::chrono::system_clock::now() + milliseconds(100));
  server->Wait();
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  return 0;
}
