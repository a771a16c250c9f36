// Store: the small key-value interface that bootstraps communicators and
// coordinates agents. Implementations: gRPC client (dtrun's server), in-memory
// (tests, worlds of one), and a prefix decorator (one namespace per round).
// All methods are thread-safe; none is collective.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rtd {

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until the key exists; throws rtd::Error(kTimeout) naming the key after timeout.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Adds delta to the integer under key (missing counts as 0); returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Stores desired if the value is expected (or the key is missing and expected is empty);
  // returns the value held afterwards.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  virtual bool remove(const std::string& key) = 0;
  // True when every key exists; does not wait.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // The same store with every call given up after `limit` (a blocking get:
  // after its own timeout plus `limit`), for traffic that must not hold its
  // caller long when the store hangs, such as the flight recorder's reports.
  // nullptr where calls cannot hang (no network): use this store as it is.
  virtual std::shared_ptr<Store> bounded(std::chrono::milliseconds limit) {
    (void)limit;
    return nullptr;
  }
};

std::shared_ptr<Store> make_memory_store();
std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> inner);
// Connects to dtrun's store at "host:port"; every call carries token.
// agent_secret: dtrun's agents only (their keys under "dtrun/" need it).
std::shared_ptr<Store> make_grpc_store(const std::string& address, const std::string& token,
                                       const std::string& agent_secret = "");

}  // namespace rtd
