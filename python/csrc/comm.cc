#include "comm.h"

#include <utility>

#include "device_streams.h"
#include "errors.h"
#include "python_warning.h"

namespace rtd_torch {

Comm::Comm(c10::intrusive_ptr<c10d::Store> store, CommOptions options)
    : bridge_(std::move(store)), options_(std::move(options)) {
  // Every collective on the communicator's own stream (inline_bytes 0): a
  // small one on the caller's stream would order two groups' calls on it,
  // and ranks that call them in different orders would wait for each other.
  rtd_comm_options o{};
  o.copy_engines = options_.copy_engines ? 1 : 0;
  o.inline_bytes = 0;
  o.stream_priority = options_.high_priority_stream ? 1 : 0;
  handle_ = rtd_comm_create_with(
      bridge_.ops(), options_.cuda ? "nccl" : "gloo", options_.name.c_str(), options_.rank,
      options_.size, options_.cuda ? options_.device : -1, nullptr, options_.timeout.count(), &o);
  if (handle_ == nullptr) {
    raise_last_error("rtd: setting up the " + options_.name + " on rank " +
                     std::to_string(options_.rank));
  }
}

Comm::~Comm() {
  size_t in_flight = 0;
  for (const Dropped& d : dropped_) {
    in_flight += d.work != nullptr && rtd_work_done(d.work) == 0 ? 1 : 0;
  }
  if (in_flight > 0) {  // cut short below: say so, or their results would be lost unseen
    warn_python(options_.name + " on rank " + std::to_string(options_.rank) + ": destroyed with " +
                std::to_string(in_flight) +
                " collective(s) in flight whose Works were dropped unwaited; they are cut short, "
                "and their tensors may hold partial results (wait() on a collective's Work "
                "before destroying its group)");
  }
  rtd_comm_destroy(handle_);  // waits for (or aborts) what is in flight
  for (Dropped& d : dropped_) {
    if (d.work != nullptr) {
      rtd_work_free(d.work);
    }
  }
}

void Comm::check(const std::string& where) const {
  if (rtd_comm_failed(handle_) != 0) {
    raise_failure(where, rtd_last_error());
  }
}

void Comm::abort() { rtd_comm_abort(handle_); }

const c10::Stream& Comm::finishing_stream() {
  if (!finishing_) {
    finishing_ = pool_stream(options_.device);
  }
  return *finishing_;
}

void Comm::keep_until_done(rtd_work* work, std::vector<at::Tensor> tensors,
                           std::optional<c10::Event> done) {
  std::lock_guard<std::mutex> lock(dropped_mu_);
  dropped_.push_back(Dropped{work, std::move(tensors), std::move(done)});
}

void Comm::reap() {
  std::lock_guard<std::mutex> lock(dropped_mu_);
  while (!dropped_.empty()) {
    Dropped& d = dropped_.front();
    if ((d.work != nullptr && rtd_work_done(d.work) == 0) || (d.done && !d.done->query())) {
      return;  // in order: a later one is not done before it on one stream
    }
    if (d.work != nullptr) {
      rtd_work_free(d.work);
    }
    dropped_.pop_front();
  }
}

}  // namespace rtd_torch
