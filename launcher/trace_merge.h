// dtrun's half of the trace (rt_dist/trace.h): the ranks' Chrome-trace files
// in RTD_TRACE_DIR merged into one, trace.json, that Perfetto opens with a
// row per rank.
#pragma once

#include <string>

namespace rtd::launcher {

// Merges DIR/rank_<r>.json (every rank whose file is there; a rank killed
// before it could write has none) into DIR/trace.json; returns the number
// of ranks merged. Throws rtd::Error naming a file it cannot read or write.
int merge_traces(const std::string& dir);

}  // namespace rtd::launcher
