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

// Which files are this job's: its run id (TORCHELASTIC_RUN_ID), and of its
// rounds the last one's restart count and world size. A rank file written
// by another job, or by an earlier round of this one, is left out.
struct TraceRun {
  std::string run;
  int restart = 0;
  int world = 0;
};

struct MergedTrace {
  int ranks = 0;    // rank files merged
  int skipped = 0;  // rank files of other jobs or rounds, left out
};

// Merges DIR/rank_<r>.json of `run` (every rank whose file is there; a rank
// killed before it could write has none) into DIR/trace.json. Throws
// rtd::Error naming a file it cannot read or write.
MergedTrace merge_traces(const std::string& dir, const TraceRun& run);

}  // namespace rtd::launcher
