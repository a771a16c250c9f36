// PrefixStore: a decorator that puts every key under "prefix/", so that each
// rendezvous round (or communicator) has a namespace of its own.
#include <utility>

#include "rt_dist/store.h"

namespace rtd {
namespace {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
      : prefix_(std::move(prefix) + "/"), inner_(std::move(inner)) {}

  void set(const std::string& key, const std::string& value) override {
    inner_->set(prefix_ + key, value);
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_->get(prefix_ + key, timeout);
  }
  std::optional<std::string> try_get(const std::string& key) override {
    return inner_->try_get(prefix_ + key);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return inner_->add(prefix_ + key, delta);
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    return inner_->compare_set(prefix_ + key, expected, desired);
  }
  bool remove(const std::string& key) override { return inner_->remove(prefix_ + key); }
  bool check(const std::vector<std::string>& keys) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& key : keys) full.push_back(prefix_ + key);
    return inner_->check(full);
  }
  std::shared_ptr<Store> bounded(std::chrono::milliseconds limit) override {
    auto inner = inner_->bounded(limit);
    if (!inner) return nullptr;
    return std::make_shared<PrefixStore>(prefix_.substr(0, prefix_.size() - 1), std::move(inner));
  }

 private:
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace

std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> inner) {
  return std::make_shared<PrefixStore>(std::move(prefix), std::move(inner));
}

}  // namespace rtd
