// GroupWork: waits on each part against one shared deadline.
#include "collectives/group_work.h"

namespace rtd {

bool GroupWork::done() const {
  for (const auto& p : parts_) {
    if (!p->done()) return false;
  }
  return true;
}

void GroupWork::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& p : parts_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    p->wait(std::max(left, std::chrono::milliseconds(0)));
  }
}

void GroupWork::wait(StreamRef stream) {
  for (const auto& p : parts_) p->wait(stream);
}

std::optional<Error> GroupWork::error() const {
  for (const auto& p : parts_) {
    if (auto e = p->error()) return e;
  }
  return std::nullopt;
}

}  // namespace rtd
