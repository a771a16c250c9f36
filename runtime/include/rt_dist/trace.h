// A timeline of each rank's steps (docs/operations.md). With RTD_TRACE_DIR
// set, every rank keeps its last RTD_TRACE_EVENTS events in a ring (the
// trainer's Scopes, every collective with its size, the data-parallel
// engines' buckets, gathers, reductions and optimizer steps, the copy engines'
// individual copies in GPU time) and writes them
// as Chrome-trace JSON to RTD_TRACE_DIR/rank_<r>.json when it exits (or at
// flush()); dtrun merges a job's ranks into RTD_TRACE_DIR/trace.json, which
// Perfetto and chrome://tracing open. Scopes are NVTX ranges too, so that
// `nsys profile dtrun ...` shows them. Without RTD_TRACE_DIR a Scope costs
// one branch (and an NVTX call, a no-op unless a profiler is attached).
#pragma once

#include <cstdint>
#include <string>

namespace rtd::trace {

// Whether events are recorded (RTD_TRACE_DIR is set).
bool enabled();

// A span on the calling thread, from construction to destruction:
//   { rtd::trace::Scope s("forward"); model.forward(); }
class Scope {
 public:
  explicit Scope(const char* name, const char* category = "step");
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  const char* category_;
  std::int64_t start_us_ = -1;
};

// A finished span (the library's own: a collective from call to completion).
// track: the timeline row it belongs on ("comm 0"); detail: shown with it
// (sizes, dtypes).
void span(const std::string& name, const std::string& category, const std::string& track,
          std::int64_t start_us, std::int64_t end_us, const std::string& detail = "");
// Microseconds on the clock the events use (the wall clock, comparable across nodes).
std::int64_t now_us();
// Writes this rank's ring now (it is also written when the process exits).
void flush();

}  // namespace rtd::trace
