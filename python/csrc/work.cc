#include "work.h"

#include <ATen/Parallel.h>
#include <ATen/core/jit_type.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <set>
#include <string>

#include "device_streams.h"
#include "errors.h"

namespace rtd_torch {
namespace {

// A Work without an operation (nothing to move on this rank) is done.
bool op_done(rtd_work* w) { return w == nullptr || rtd_work_done(w) != 0; }
bool op_failed(rtd_work* w) { return w != nullptr && rtd_work_error(w) != 0; }
int op_wait(rtd_work* w, int64_t ms) { return w == nullptr ? 0 : rtd_work_wait(w, ms); }
int op_wait_stream(rtd_work* w, void* stream) {
  return w == nullptr ? 0 : rtd_work_wait_stream(w, stream);
}

// The failure as an exception, to be thrown or set in a future: handed to
// the program, so not one to report at exit (Comm::note_raised).
std::exception_ptr failure(Comm& comm, const std::string& where, const std::string& message) {
  comm.note_raised();
  try {
    raise_failure(where, message);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

const char* profiling_title(const char* op) {
  if (!at::hasCallbacks()) {
    return nullptr;
  }
  // c10d::Work's profiler span keeps the pointer: one lasting string per op.
  static std::mutex mu;
  static std::set<std::string> titles;
  std::lock_guard<std::mutex> lock(mu);
  return titles.insert(std::string("rtd:") + op).first->c_str();
}

WorkRTD::WorkRTD(std::shared_ptr<Comm> comm, rtd_work* handle, c10d::OpType type, const char* op,
                 std::string what, Finish finish)
    : c10d::Work(-1, type, profiling_title(op)),
      comm_(std::move(comm)),
      handle_(handle),
      what_(std::move(what)),
      finish_(std::move(finish)) {
  if (comm_->cuda() && finish_.after) {
    OnDevice on_device(comm_->device());
    CurrentStream on(comm_->finishing_stream());
    if (op_wait_stream(handle_, comm_->finishing_stream().native_handle()) != 0) {
      raise_last_error(what_);
    }
    finish_.after();
    done_.emplace(c10::DeviceType::CUDA);
    done_->record(comm_->finishing_stream());
  }
}

WorkRTD::~WorkRTD() {
  std::lock_guard<std::mutex> lock(mu_);
  end_profiling();
  if (!finished_ && !finish_.keep.empty() && !done()) {
    comm_->keep_until_done(handle_, std::move(finish_.keep), std::move(done_), what_);
    return;
  }
  if (handle_ != nullptr) {
    if (!error_ && op_failed(handle_)) {
      comm_->note_unraised(what_ + ": " + rtd_last_error());  // nobody looked
    }
    rtd_work_free(handle_);
  }
}

bool WorkRTD::done() const { return op_done(handle_) && (!done_ || done_->query()); }

bool WorkRTD::isCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ || done();
}

bool WorkRTD::isSuccess() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !error_ && !op_failed(handle_);
}

std::exception_ptr WorkRTD::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_ && op_failed(handle_)) {
    return failure(*comm_, what_, rtd_last_error());
  }
  return error_;
}

void WorkRTD::throw_if_failed() {
  if (error_) {
    std::rethrow_exception(error_);
  }
  if (op_failed(handle_)) {
    error_ = failure(*comm_, what_, rtd_last_error());
    std::rethrow_exception(error_);
  }
}

void WorkRTD::finish_host(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) {
    throw_if_failed();
    return;
  }
  const int64_t ms = timeout == kNoTimeout ? -1 : timeout.count();
  if (op_wait(handle_, ms) != 0) {
    error_ = failure(*comm_, what_, rtd_last_error());
    std::rethrow_exception(error_);
  }
  if (finish_.after) {
    finish_.after();
  }
  finished_ = true;
  finish_.keep.clear();
  end_profiling();
}

void WorkRTD::end_profiling() {
  if (recordFunctionEndCallback_) {
    recordFunctionEndCallback_();
    recordFunctionEndCallback_ = nullptr;
  }
}

bool WorkRTD::wait(std::chrono::milliseconds timeout) {
  if (!comm_->cuda()) {
    finish_host(timeout);
    return true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  throw_if_failed();
  comm_->check(what_);
  if (finish_.blocking) {
    const int64_t ms = timeout == kNoTimeout ? -1 : timeout.count();
    if (op_wait(handle_, ms) != 0) {
      error_ = failure(*comm_, what_, rtd_last_error());
      std::rethrow_exception(error_);
    }
  }
  if (timeout != kNoTimeout && op_wait(handle_, timeout.count()) != 0) {
    // A deadline of the caller's: the host waits for the operation, as with
    // ProcessGroupNCCL, and a late one fails in the words torch's tests expect.
    error_ = failure(*comm_, what_,
                     "caught collective operation timeout: not done within the wait's " +
                         std::to_string(timeout.count()) + " ms: " + rtd_last_error());
    std::rethrow_exception(error_);
  }
  OnDevice on_device(comm_->device());
  if (done_) {
    done_->block(current_stream(comm_->device()));
  } else if (op_wait_stream(handle_, current_stream(comm_->device()).native_handle()) != 0) {
    error_ = failure(*comm_, what_, rtd_last_error());
    std::rethrow_exception(error_);
  }
  finished_ = true;
  finish_.keep.clear();  // the caller's stream is ordered after the operation
  end_profiling();
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkRTD::getFuture() {
  std::lock_guard<std::mutex> lock(mu_);
  if (future_) {
    return future_;
  }
  auto type = c10::ListType::create(c10::TensorType::get());
  if (!comm_->cuda()) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(type);
    if (finished_) {  // waited already: complete now (DDP's reducer reads it at once)
      if (error_) {
        future_->setError(error_);
      } else {
        future_->markCompleted(c10::IValue(finish_.outputs));
      }
      return future_;
    }
    c10::intrusive_ptr<WorkRTD> self = c10::intrusive_ptr<WorkRTD>::reclaim_copy(this);
    at::launch([self] {
      try {
        self->finish_host(kNoTimeout);
        self->future_->markCompleted(c10::IValue(self->finish_.outputs));
      } catch (...) {
        self->comm_->note_raised();
        self->future_->setError(std::current_exception());
      }
    });
    return future_;
  }
  const c10::Device gpu(c10::DeviceType::CUDA, comm_->device());
  future_ = c10::make_intrusive<c10::ivalue::Future>(type, std::vector<c10::Device>{gpu});
  OnDevice on_device(comm_->device());
  CurrentStream on(comm_->finishing_stream());
  if (!done_ && op_wait_stream(handle_, comm_->finishing_stream().native_handle()) != 0) {
    future_->setError(failure(*comm_, what_, rtd_last_error()));
    return future_;
  }
  // Recorded on the finishing stream: a wait on the future orders the
  // waiter's stream after the operation (and its finishing step).
  future_->markCompleted(c10::IValue(finish_.outputs));
  return future_;
}

LocalWork::LocalWork(c10d::OpType type, const char* op, int rank, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, profiling_title(op)), rank_(rank), outputs_(std::move(outputs)) {
  std::vector<c10::Device> devices;
  if (!outputs_.empty() && outputs_[0].is_cuda()) {
    devices.push_back(outputs_[0].device());
  }
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                     devices);
}

c10::intrusive_ptr<LocalWork> LocalWork::done(c10d::OpType type, const char* op, int rank) {
  auto work = c10::make_intrusive<LocalWork>(type, op, rank, std::vector<at::Tensor>{});
  work->complete();
  return work;
}

void LocalWork::complete(std::exception_ptr error) {
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish(error);
}

BatchWork::BatchWork(std::vector<c10::intrusive_ptr<c10d::Work>> works)
    : c10d::Work(-1, c10d::OpType::COALESCED), works_(std::move(works)) {}

bool BatchWork::isCompleted() {
  for (auto& w : works_) {
    if (!w->isCompleted()) {
      return false;
    }
  }
  return true;
}

bool BatchWork::isSuccess() const {
  for (const auto& w : works_) {
    if (!w->isSuccess()) {
      return false;
    }
  }
  return true;
}

std::exception_ptr BatchWork::exception() const {
  for (const auto& w : works_) {
    if (auto e = w->exception()) {
      return e;
    }
  }
  return nullptr;
}

bool BatchWork::wait(std::chrono::milliseconds timeout) {
  for (auto& w : works_) {
    w->wait(timeout);
  }
  return true;
}

std::vector<at::Tensor> BatchWork::result() {
  std::vector<at::Tensor> all;
  for (auto& w : works_) {
    for (at::Tensor& t : w->result()) {
      all.push_back(t);
    }
  }
  return all;
}

c10::intrusive_ptr<c10::ivalue::Future> BatchWork::getFuture() {
  auto type = c10::ListType::create(c10::TensorType::get());
  c10::List<c10::intrusive_ptr<c10::ivalue::Future>> each(c10::FutureType::create(type));
  for (auto& w : works_) {
    each.push_back(w->getFuture());
  }
  return c10::collectAll(each)->then(
      [outputs = result()](c10::ivalue::Future& all) {
        for (const c10::IValue& f : all.value().toList()) {  // the first failure, if any
          if (f.toFuture()->hasError()) {
            f.toFuture()->value();
          }
        }
        return c10::IValue(outputs);
      },
      type);
}

int WorkRTD::sourceRank() const { return handle_ == nullptr ? -1 : rtd_work_source(handle_); }

}  // namespace rtd_torch
