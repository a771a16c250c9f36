// GlooStoreAdapter: presents an rtd::Store as the store Gloo's full-mesh setup
// reads and writes, with our deadline on every wait.
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>

#include "collectives/join_wait.h"
#include "rt_dist/store.h"

namespace rtd::gloo_backend {

class GlooStoreAdapter : public ::gloo::rendezvous::Store {
 public:
  // Gloo's keys are the ranks that publish them: a wait names that rank.
  GlooStoreAdapter(std::shared_ptr<rtd::Store> store, JoinWait wait)
      : store_(std::move(store)), wait_(std::move(wait)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string value = await(key, wait_.timeout);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, wait_.timeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const auto& key : keys) await(key, timeout);
  }

 private:
  std::string await(const std::string& key, std::chrono::milliseconds timeout) {
    JoinWait w = wait_;
    w.peer = "rank " + key;
    w.timeout = timeout;
    return await_join(*store_, key, w);
  }

  std::shared_ptr<rtd::Store> store_;
  JoinWait wait_;
};

}  // namespace rtd::gloo_backend
