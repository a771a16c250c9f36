// MpiStoreHost: rank 0's StoreServer, its address and token broadcast over MPI.
#include "runtime/mpi_store.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "rt_dist/error.h"
#include "runtime/core/log.h"
#include "runtime/leave_store.h"

namespace rtd {
namespace {

constexpr const char* kLeavingKey = "mpi/leaving";
constexpr std::chrono::seconds kLeaveWait{30};

std::string random_token() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) {
    char part[9];
    std::snprintf(part, sizeof(part), "%08x", rd());
    out += part;
  }
  return out;
}

}  // namespace

MpiStoreHost::MpiStoreHost(const WorldInfo& world, const std::string& host)
    : world_(world), session_(mpi::MpiSession::shared()) {
  // From rank 0: "host:port token", or "!" and why it cannot host the store
  // (every rank takes part in the broadcast either way, so none is left waiting).
  std::string message;
  if (world.rank == 0) {
    try {
      const bool one_host = world.local_world_size == world.world_size;
      const std::string token = random_token();
      server_ = std::make_unique<StoreServer>(one_host ? "127.0.0.1" : "0.0.0.0", 0, token);
      message = host + ":" + std::to_string(server_->port()) + " " + token;
    } catch (const std::exception& e) {
      message = std::string("!") + e.what();
    }
  }
  message = session_->broadcast(message, 0);
  if (!message.empty() && message[0] == '!') {
    throw Error(ErrorCategory::kConfig,
                "rank 0 could not host the job's store under mpirun: " + message.substr(1));
  }
  const auto space = message.find(' ');
  if (space == std::string::npos) {
    throw Error(ErrorCategory::kInternal,
                "MPI store bootstrap: malformed address '" + message + "'");
  }
  store_ = make_grpc_store(message.substr(0, space), message.substr(space + 1));
  log::get("runtime")->debug("store of rank 0 at {}", message.substr(0, space));
}

MpiStoreHost::~MpiStoreHost() {
  leave_store(*store_, server_ != nullptr, world_.world_size, kLeavingKey, kLeaveWait);
  store_.reset();
  server_.reset();
}

}  // namespace rtd
