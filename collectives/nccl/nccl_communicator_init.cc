// NcclCommunicator's set-up: the NCCL configuration, its stream, and the
// communicator made directly or split off a nonblocking one, with the
// diagnosis of ranks that never arrive (nccl_communicator.h).
#include <chrono>
#include <string>

#include "collectives/nccl/direct_init.h"
#include "collectives/nccl/nccl_check.h"
#include "collectives/nccl/nccl_communicator.h"

namespace rtd::nccl {

ncclConfig_t NcclCommunicator::make_config(bool blocking) const {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  const NcclSettings& s = options_.settings;
  if (s.cga_cluster_size >= 0) config.cgaClusterSize = s.cga_cluster_size;
  if (s.min_ctas > 0) config.minCTAs = s.min_ctas;
  if (s.max_ctas > 0) config.maxCTAs = s.max_ctas;
  if (!s.net_name.empty()) config.netName = options_.settings.net_name.c_str();
  if (s.cta_policy == "default") config.CTAPolicy = NCCL_CTA_POLICY_DEFAULT;
  if (s.cta_policy == "efficiency") config.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
  if (s.cta_policy == "zero") config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  return config;
}

void NcclCommunicator::create_stream_and_scratch() {
  CudaApi& cuda = state_->cuda();
  RTD_CUDA_CHECK(cuda, cuda.set_device(options_.device),
                 "selecting GPU " + std::to_string(options_.device));
  RTD_CUDA_CHECK(cuda, cuda.stream_create(&stream_, options_.settings.stream_priority != 0),
                 "creating the communication stream");
  RTD_CUDA_CHECK(cuda, cuda.event_create(&start_), "creating a CUDA event");
  RTD_CUDA_CHECK(cuda, cuda.malloc(&scratch_, sizeof(float)), "allocating the barrier scratch");
}

double NcclCommunicator::init_and_split(const ncclUniqueId& id, const std::string& who,
                                        std::chrono::steady_clock::time_point deadline) {
  ncclConfig_t init_config = make_config(false);
  ncclComm_t init_comm = nullptr;
  ncclResult_t rc =
      options_.nccl->comm_init_rank_config(&init_comm, size_, id, rank_, &init_config);
  state_->set_comm(init_comm);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    throw nccl_error(*options_.nccl, init_comm, rc, who + " creating the NCCL communicator");
  }
  state_->settle(init_comm, who + " creating the NCCL communicator", deadline);

  const auto initialized = std::chrono::steady_clock::now();
  start_watchdog();
  ncclConfig_t data_config = make_config(true);
  ncclComm_t data_comm = nullptr;
  {
    CallWatchdog::Scope scope(*watchdog_, "creating the blocking data-path communicator");
    rc = options_.nccl->comm_split(init_comm, 0, rank_, &data_comm, &data_config);
  }
  if (watchdog_->fired()) throw_call_failed(rc, who + " creating the data-path communicator");
  if (rc != ncclSuccess && rc != ncclInProgress) {
    throw nccl_error(*options_.nccl, init_comm, rc, who + " creating the data-path communicator");
  }
  // From a nonblocking parent the new handle is valid only once the parent settles.
  state_->settle(init_comm, who + " creating the data-path communicator", deadline);
  if (data_comm == nullptr) {
    throw Error(ErrorCategory::kBackend, who + ": ncclCommSplit returned no communicator");
  }
  state_->settle(data_comm, who + " creating the data-path communicator", deadline);
  state_->set_comm(data_comm);
  state_->destroy_other(init_comm);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - initialized)
      .count();
}

void NcclCommunicator::init_directly(const ncclUniqueId& id, const std::string& who,
                                     std::chrono::steady_clock::time_point deadline) {
  state_->set_comm(init_blocking_within(options_.nccl, options_.cuda, options_.device, size_, id,
                                        rank_, make_config(true), deadline, options_.timeout,
                                        who + " creating the NCCL communicator"));
  start_watchdog();
}

NcclCommunicator::NcclCommunicator(FromSplit, const NcclOptions& options, ncclComm_t comm, int rank,
                                   int size)
    : rank_(rank),
      size_(size),
      inline_bytes_(std::max(options.settings.inline_bytes, 0LL)),
      options_(options) {
  state_ = std::make_shared<CommState>(options_.nccl, options_.cuda, rank_, options_.timeout);
  state_->set_comm(comm);
  create_stream_and_scratch();
  start_watchdog();
  start_recorder();
}

namespace {
constexpr const char* kArrivedPrefix = "nccl_init/";  // + rank: it reached NCCL's init
constexpr std::chrono::seconds kArrivalReadLimit{5};  // each store read of the diagnosis
}  // namespace

void NcclCommunicator::mark_arrival() {
  try {
    options_.store->set(kArrivedPrefix + std::to_string(rank_), "1");
  } catch (const std::exception& e) {  // only the diagnosis of a timeout reads it
    log::get("nccl")->warn("rank {}: not marked as reaching NCCL's init: {}", rank_, e.what());
  }
}

std::string NcclCommunicator::missing_at_init() {
  std::vector<int> missing;
  try {
    std::shared_ptr<Store> store = options_.store->bounded(kArrivalReadLimit);
    Store& s = store ? *store : *options_.store;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && !s.try_get(kArrivedPrefix + std::to_string(r))) missing.push_back(r);
    }
  } catch (const std::exception& e) {
    return std::string("which ranks reached NCCL's init is unknown (the store: ") + e.what() + ")";
  }
  if (missing.empty()) {
    return "every rank reached NCCL's init, so NCCL's own connections did not come up (a "
           "firewall, NCCL_SOCKET_IFNAME naming the wrong interface, or a peer that died inside "
           "it; NCCL_DEBUG=INFO shows the transport)";
  }
  return "rank(s) " + rank_list(missing) +
         " never reached NCCL's init (exited, failed or stuck before it, or never started)";
}

}  // namespace rtd::nccl
