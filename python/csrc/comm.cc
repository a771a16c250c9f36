#include "comm.h"

#include <algorithm>
#include <utility>

#include "device_streams.h"
#include "errors.h"
#include "python_warning.h"

namespace rtd_torch {
namespace {

std::mutex g_mu;  // guards the two below
std::vector<const Comm*> g_live;
std::vector<std::string> g_unraised;  // of communicators destroyed

// The failure of `comm` itself, if it failed ("" if not).
std::string comm_failure(const Comm& comm) {
  if (rtd_comm_failed(comm.handle()) == 0) return "";
  return comm.options().name + " on rank " + std::to_string(comm.options().rank) + ": " +
         rtd_last_error();
}

}  // namespace

std::vector<std::string> unraised_failures() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<std::string> out = g_unraised;
  for (const Comm* c : g_live) {
    std::string why = c->unraised_failure();
    if (!why.empty()) out.push_back(std::move(why));
  }
  return out;
}

std::string Comm::unraised_failure() const {
  if (raised_) return "";  // the program saw a failure of it: the others follow from that one
  std::string why = comm_failure(*this);
  std::lock_guard<std::mutex> lock(dropped_mu_);
  std::vector<std::string> ops = unraised_ops_;
  for (const Dropped& d : dropped_) {  // failed, not yet reaped
    if (d.work != nullptr && rtd_work_error(d.work) != 0)
      ops.push_back(d.what + ": " + rtd_last_error());
  }
  for (const std::string& op : ops) {
    why += (why.empty() ? "" : "; ") + op + " (its Work was dropped unwaited)";
  }
  return why;
}

void Comm::note_unraised(std::string what) {
  std::lock_guard<std::mutex> lock(dropped_mu_);
  if (unraised_ops_.size() < 16) unraised_ops_.push_back(std::move(what));  // the first say it
}

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
  std::lock_guard<std::mutex> lock(g_mu);
  g_live.push_back(this);
}

Comm::~Comm() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_live.erase(std::remove(g_live.begin(), g_live.end(), this), g_live.end());
    std::string why = unraised_failure();
    if (!why.empty()) g_unraised.push_back(std::move(why));
  }
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
    note_raised();
    raise_failure(where, rtd_last_error());
  }
}

void Comm::abort() {
  note_raised();  // the program's own act, not a failure to report
  rtd_comm_abort(handle_);
}

const c10::Stream& Comm::finishing_stream() {
  if (!finishing_) {
    finishing_ = pool_stream(options_.device);
  }
  return *finishing_;
}

void Comm::keep_until_done(rtd_work* work, std::vector<at::Tensor> tensors,
                           std::optional<c10::Event> done, std::string what) {
  std::lock_guard<std::mutex> lock(dropped_mu_);
  dropped_.push_back(Dropped{work, std::move(tensors), std::move(done), std::move(what)});
}

void Comm::reap() {
  std::lock_guard<std::mutex> lock(dropped_mu_);
  while (!dropped_.empty()) {
    Dropped& d = dropped_.front();
    if ((d.work != nullptr && rtd_work_done(d.work) == 0) || (d.done && !d.done->query())) {
      return;  // in order: a later one is not done before it on one stream
    }
    if (d.work != nullptr) {
      if (rtd_work_error(d.work) != 0 && unraised_ops_.size() < 16)
        unraised_ops_.push_back(d.what + ": " + rtd_last_error());
      rtd_work_free(d.work);
    }
    dropped_.pop_front();
  }
}

}  // namespace rtd_torch
