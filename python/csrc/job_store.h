// JobStore: dtrun's store (rtd_job_store_open) as a c10d::Store, the store a
// PyTorch job keeps across a lost worker: torch's default TCPStore lives in
// rank 0's process and dies with it. rt_dist.torch.recovery builds each
// generation's process group on it.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "rt_dist/c_api.h"

namespace rtd_torch {

class JobStore : public c10d::Store {
 public:
  // Opens a connection to the job's store; throws naming why (not under dtrun).
  explicit JobStore(std::chrono::milliseconds timeout = kDefaultTimeout);
  ~JobStore() override;
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  c10::intrusive_ptr<c10d::Store> clone() override;
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<uint8_t> get_within(const std::string& key, std::chrono::milliseconds timeout);

  rtd_job_store* handle_ = nullptr;
};

// What dtrun told this worker (rtd_job_info_read); throws naming a malformed variable.
rtd_job_info read_job_info();

}  // namespace rtd_torch
