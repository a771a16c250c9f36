// EtcdStore: the workers' job store (rtd::Store) kept in etcd, under one
// prefix per run ("/dtrun/<rdzv-id>/store/<run id>/"), so that it outlives
// any node: with the etcd backend a lost host takes nothing of the workers'
// with it, and in-process recovery goes on across it (docs/recovery.md).
// Each node's dtrun serves it to its own workers (store_relay.h).
//
// Every write is one etcd transaction (add and compare_set: compare the value
// read, retry on a race); a get that waits watches its key. What etcd refuses
// (a value over its request limit, 1.5 MiB by default) is an error naming it.
#pragma once

#include <memory>
#include <string>

#include "launcher/etcd/etcd_client.h"
#include "rt_dist/store.h"

namespace rtd::launcher {

std::shared_ptr<Store> make_etcd_store(std::shared_ptr<EtcdClient> client, std::string prefix);

// store.add(key, delta) once though the call is made again for the same
// request (request_id: unique to it, the same on each try), as the relay does
// when etcd answered too slowly to know whether the first try committed;
// for a store that is not etcd's, a plain add.
std::int64_t add_once(Store& store, const std::string& key, std::int64_t delta,
                      const std::string& request_id);

}  // namespace rtd::launcher
