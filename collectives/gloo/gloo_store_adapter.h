// GlooStoreAdapter: presents an rtd::Store as the store Gloo's full-mesh setup
// reads and writes, with our deadline on every wait.
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>

#include "rt_dist/store.h"

namespace rtd::gloo_backend {

class GlooStoreAdapter : public ::gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<rtd::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string value = store_->get(key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const auto& key : keys) store_->get(key, timeout);
  }

 private:
  std::shared_ptr<rtd::Store> store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace rtd::gloo_backend
