// The workers' job store in etcd (etcd_store.h).
#include "launcher/etcd/etcd_store.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "rt_dist/error.h"

namespace rtd::launcher {
namespace {

using Clock = std::chrono::system_clock;

// Transactions that lose a race are tried again this many times: more means
// the key is written in a tight loop by many, which the job's store is not for.
constexpr int kMaxRaces = 1000;
// A check of more keys than this reads them as one range.
constexpr std::size_t kFewKeys = 8;

std::int64_t parse_count(const std::string& key, const std::string& text) {
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    throw Error(ErrorCategory::kInvalidArgument,
                "store: add on key '" + key.substr(0, 64) + "' whose value is not an integer");
  return value;
}

class EtcdStore : public Store {
 public:
  EtcdStore(std::shared_ptr<EtcdClient> client, std::string prefix)
      : client_(std::move(client)), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::string& value) override {
    client_->put(prefix_ + key, value);
  }

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    const auto until = Clock::now() + timeout;
    for (;;) {
      std::int64_t revision = 0;
      if (auto kv = client_->get(prefix_ + key, &revision)) return kv->value;
      if (Clock::now() >= until)
        throw Error(ErrorCategory::kTimeout, "store: key '" + key + "' did not appear within " +
                                                 std::to_string(timeout.count()) + " ms");
      client_->wait_change(prefix_ + key, revision, until);
    }
  }

  std::optional<std::string> try_get(const std::string& key) override {
    if (auto kv = client_->get(prefix_ + key)) return kv->value;
    return std::nullopt;
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return add_once(key, delta, "");
  }

  // request_id non-empty: the request's tries share a receipt holding the
  // count it wrote, so that a try after one that gave up unsure (its
  // transaction may have committed) returns that count instead of adding
  // again.
  std::int64_t add_once(const std::string& key, std::int64_t delta, const std::string& request_id) {
    const std::string receipt = request_id.empty() ? "" : client_->receipt_key(request_id);
    for (int race = 0; race < kMaxRaces; ++race) {
      if (!receipt.empty()) {
        if (std::optional<EtcdKv> done = client_->get(receipt)) {
          try {
            client_->remove(receipt);
          } catch (const Error&) {  // left behind; the count stands
          }
          return parse_count(key, done->value);
        }
      }
      std::optional<EtcdKv> kv = client_->get(prefix_ + key);
      std::int64_t value = kv ? parse_count(key, kv->value) : 0;
      if (__builtin_add_overflow(value, delta, &value))
        throw Error(ErrorCategory::kInvalidArgument, "store: add of " + std::to_string(delta) +
                                                         " on key '" + key.substr(0, 64) +
                                                         "' overflows a 64-bit integer");
      if (delta == 0 && kv) return value;
      std::optional<std::string> expected;
      if (kv) expected = kv->value;
      const std::string text = std::to_string(value);
      if (receipt.empty() ? client_->put_if(prefix_ + key, expected, text)
                          : client_->put_if(prefix_ + key, expected, text, 0, receipt, text))
        return value;
    }
    throw raced(key);
  }

  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    for (int race = 0; race < kMaxRaces; ++race) {
      std::optional<EtcdKv> kv = client_->get(prefix_ + key);
      if (!kv) {
        if (!expected.empty()) return "";
      } else if (kv->value != expected) {
        return kv->value;
      }
      std::optional<std::string> was;
      if (kv) was = kv->value;
      if (client_->put_if(prefix_ + key, was, desired)) return desired;
    }
    throw raced(key);
  }

  bool remove(const std::string& key) override { return client_->remove(prefix_ + key); }

  // Many keys (a rank's each) are read as one range: the keys under their
  // common prefix.
  bool check(const std::vector<std::string>& keys) override {
    if (keys.size() <= kFewKeys) {
      for (const std::string& key : keys)
        if (!client_->get(prefix_ + key)) return false;
      return true;
    }
    std::string common = keys.front();
    for (const std::string& key : keys)
      common.resize(static_cast<std::size_t>(
          std::mismatch(common.begin(), common.end(), key.begin(), key.end()).first -
          common.begin()));
    std::set<std::string> present;
    for (const EtcdKv& kv : client_->get_prefix(prefix_ + common))
      present.insert(kv.key.substr(prefix_.size()));
    for (const std::string& key : keys)
      if (!present.count(key)) return false;
    return true;
  }

 private:
  Error raced(const std::string& key) const {
    return Error(ErrorCategory::kUnavailable, "store: key '" + key.substr(0, 64) +
                                                  "' changed under " + std::to_string(kMaxRaces) +
                                                  " tries in a row in " + client_->describe());
  }

  std::shared_ptr<EtcdClient> client_;
  const std::string prefix_;
};

}  // namespace

std::int64_t add_once(Store& store, const std::string& key, std::int64_t delta,
                      const std::string& request_id) {
  if (auto* etcd = dynamic_cast<EtcdStore*>(&store)) return etcd->add_once(key, delta, request_id);
  return store.add(key, delta);
}

std::shared_ptr<Store> make_etcd_store(std::shared_ptr<EtcdClient> client, std::string prefix) {
  return std::make_shared<EtcdStore>(std::move(client), std::move(prefix));
}

}  // namespace rtd::launcher
