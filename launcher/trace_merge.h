// dtrun's half of the trace (rt_dist/trace.h): the ranks' Chrome-trace files
// in RTD_TRACE_DIR merged into one, trace.json, that Perfetto opens with a
// row per rank.
#pragma once

#include <string>

namespace rtd::launcher {

// Before the workers start: makes DIR (and its parents) and checks that a
// file can be written in it. Throws rtd::Error (kConfig) naming DIR and why
// (a file of that name, no permission, a read-only file system), so that a
// job does not run for hours and end without its trace.
void prepare_trace_dir(const std::string& dir);

// Merges DIR/rank_<r>.json (every rank whose file is there; a rank killed
// before it could write has none) into DIR/trace.json; returns the number
// of ranks merged. Throws rtd::Error naming a file it cannot read or write.
int merge_traces(const std::string& dir);

}  // namespace rtd::launcher
