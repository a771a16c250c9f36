#!/usr/bin/env bash
# DESIGN.md's dependency column, checked on #include lines (and no host syncs in the library):
#   runtime/core never includes collectives/, runtime/ (the rest) or launcher/;
#   collectives/ never includes runtime/ beyond runtime/core or launcher/;
#   examples/ use only the public headers; nothing outside launcher/ and tests/ includes launcher/.
set -u
root=$1
fail=0
forbid() {  # folder, pattern, reason[, allowed pattern]
  local hits
  hits=$(grep -rnE "^#include \"($2)" "$root/$1" --include='*.cc' --include='*.h' --include='*.cu' 2>/dev/null |
    grep -vE "^[^\"]*\"(${4:-^})")
  if [ -n "$hits" ]; then echo "layering: $1 must not include $2 ($3):"; echo "$hits"; fail=1; fi
}
forbid runtime/core 'collectives/|launcher/|runtime/(env|context)' "core is the bottom layer"
forbid collectives 'launcher/|runtime/(env|context)' "backends do not know the context"
forbid examples 'runtime/|collectives/|launcher/|tests/' "examples use only rt_dist/ headers"
forbid sharding 'launcher/' "only dtrun uses the launcher"
forbid bench 'launcher/' "only dtrun uses the launcher"
forbid data 'launcher/|collectives/|sharding/' "the loader needs the core and the GPU copies" \
  'collectives/device_memory.h'
# STYLE.md 3.4: no implicit host syncs in library code.
syncs=$(grep -rnE 'cuda(Stream|Device|Event)Synchronize' "$root/collectives" "$root/runtime" "$root/sharding" 2>/dev/null)
if [ -n "$syncs" ]; then echo "host synchronization in library code:"; echo "$syncs"; fail=1; fi
[ $fail -eq 0 ] && echo "layering: ok"
exit $fail
