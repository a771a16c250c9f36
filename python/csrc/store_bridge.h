// StoreBridge: torch's c10d::Store as the callbacks through which librt_dist
// bootstraps a communicator (rtd_store_ops). It must outlive the
// communicator made with it: the hang diagnosis reads the store later.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "rt_dist/c_api.h"

namespace rtd_torch {

class StoreBridge {
 public:
  explicit StoreBridge(c10::intrusive_ptr<c10d::Store> store);
  StoreBridge(const StoreBridge&) = delete;
  StoreBridge& operator=(const StoreBridge&) = delete;

  const rtd_store_ops* ops() const { return &ops_; }
  c10d::Store& store() { return *store_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  rtd_store_ops ops_{};
};

}  // namespace rtd_torch
