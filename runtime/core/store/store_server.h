// StoreServer: a gRPC server hosting the job's Store alone, for jobs that no
// dtrun started (under mpirun, rank 0 hosts it and tells the others where).
#pragma once

#include <memory>
#include <string>

namespace rtd {

class StoreServer {
 public:
  // Listens on bind_ip:port (port 0: any free one); throws rtd::Error(kConfig)
  // when it cannot.
  StoreServer(const std::string& bind_ip, int port, const std::string& token);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rtd
