#!/usr/bin/env bash
# docs/config.md names every RTD_* and DTRUN_* variable that the C++ and
# Python sources mention (the library's, dtrun's, the rtd backend's):
#   tests/config_names_check.sh SOURCE_DIR
set -u
root=$1
missing=0
for name in $(grep -rhoE '"(RTD|DTRUN)_[A-Z0-9_]+"' --include=*.cc --include=*.h --include=*.py \
    "$root/runtime" "$root/collectives" "$root/sharding" "$root/launcher" "$root/python" | tr -d '"' | sort -u); do
  grep -q "\`$name\`" "$root/docs/config.md" || { echo "docs/config.md lacks $name"; missing=1; }
done
[ $missing -eq 0 ] && echo "config names: ok"
exit $missing
