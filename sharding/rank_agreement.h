// What every rank of a data-parallel strategy must agree on before its first
// collective (the model's shapes, the options that decide what goes on the
// wire): each rank publishes a description through the store and compares it
// with every other rank's, so that a mismatch is an error on every rank
// rather than collectives that never match up.
#pragma once

#include <string>

#include "rt_dist/error.h"
#include "rt_dist/store.h"
#include "rt_dist/types.h"
#include "rt_dist/work.h"

namespace rtd {

// Collective through the store. Throws rtd::Error(kInvalidArgument) naming
// this rank's description and the first rank whose description differs:
// "<who>: rank 1 registered <mine> but rank 0 registered <theirs>; <advice>".
void check_ranks_agree(Store& store, const std::string& key_prefix, int rank, int size,
                       const std::string& mine, const std::string& who, const std::string& advice);

// Collective through the store: every rank publishes what keeps it from going
// on (`problem`, empty when nothing does). Where any rank has one, throws
// rtd::Error(category) on every rank: "<who>: rank 1: <its problem>; rank 3:
// ...; <advice>", so that no rank goes on alone into a collective that the
// others never reach.
void check_every_rank_can(Store& store, const std::string& key_prefix, int rank, int size,
                          const std::string& problem, const std::string& who,
                          const std::string& advice, ErrorCategory category);

// Collective through the store: how many of the ranks (this one included)
// run on this host, by host name; what a host's memory or disk must hold for
// all of them.
int ranks_on_this_host(Store& store, const std::string& key_prefix, int rank, int size);

// Host buffers: the host waits for work; GPU buffers: the stream does.
inline void complete(Work& work, DeviceType device, StreamRef stream) {
  if (device == DeviceType::kCuda)
    work.wait(stream);
  else
    work.wait();
}

}  // namespace rtd
