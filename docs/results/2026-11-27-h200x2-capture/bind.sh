#!/usr/bin/env bash
# bind.sh MODE PROG ARGS...: runs PROG bound to the CPUs near this rank's GPU
# (MODE near), to those of the other half (far), or unbound (none).
mode=$1; shift
g=${LOCAL_RANK:-0}
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i "$g" | tr 'A-F' 'a-f' | sed 's/^0000//')
node=$(cat /sys/bus/pci/devices/$bus/numa_node 2>/dev/null || echo -1)
nodes=$(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l)
n=$(nproc --all)
if [ "$node" -ge 0 ] && [ "$nodes" -gt 1 ]; then
  near=$(cat /sys/devices/system/node/node$node/cpulist)
  other=$(( (node + 1) % nodes ))
  far=$(cat /sys/devices/system/node/node$other/cpulist)
else
  h=$((n / 2))
  if [ "$g" = 0 ]; then near="0-$((h - 1))"; far="$h-$((n - 1))"; else near="$h-$((n - 1))"; far="0-$((h - 1))"; fi
fi
echo "bind: rank $g gpu $bus node $node of $nodes; mode $mode near $near far $far" >&2
case $mode in
  near) exec taskset -c "$near" "$@" ;;
  far) exec taskset -c "$far" "$@" ;;
  *) exec "$@" ;;
esac
