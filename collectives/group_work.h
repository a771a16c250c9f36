// GroupWork: one Work over several, for the group() of backends whose
// operations complete one by one (Gloo, MPI). Done when all are done; its
// error is the first of theirs.
#pragma once

#include <memory>
#include <vector>

#include "rt_dist/work.h"

namespace rtd {

class GroupWork : public Work {
 public:
  GroupWork(std::vector<std::shared_ptr<Work>> parts, std::chrono::milliseconds default_timeout)
      : parts_(std::move(parts)), default_timeout_(default_timeout) {}

  bool done() const override;
  void wait() override { wait(default_timeout_); }
  void wait(std::chrono::milliseconds timeout) override;
  void wait(StreamRef stream) override;
  std::optional<Error> error() const override;

 private:
  std::vector<std::shared_ptr<Work>> parts_;
  std::chrono::milliseconds default_timeout_;
};

}  // namespace rtd
