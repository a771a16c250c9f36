"""What is live at the peak of a torch memory snapshot (torch_backend.py's
SNAPSHOT=DIR writes one a configuration):
    python bench/memory_peak.py DIR/fsdp2_nccl.pickle [DIR/fsdp2_comms_rtd.pickle ...]
Replays the trace backwards from the blocks live at the dump, so blocks
allocated before the recording began (parameters, optimizer states, lent
buffers) are counted too; prints the peak of allocated bytes, the allocation
that reached it, and the blocks live there grouped by who allocated them (the
innermost FSDP2, rt_dist or benchmark frame; "before" for blocks older than
the recording). A block counts until its free completes: one freed while
another stream still used it (record_stream) counts until then, as torch's
"active" bytes do, not its "allocated". Needs only Python's pickle: torch is
not imported.
"""

import collections
import os
import pickle
import sys

# Frames that name an allocation well, innermost first.
MARKERS = ("_fully_shard", "rt_dist", "torch_backend.py", "torch/optim", "torch/nn/modules")


def label(frames, none="before the recording"):
    if not frames:
        return none
    for f in frames:
        name = f.get("filename", "")
        if any(m in name for m in MARKERS):
            return f"{os.path.basename(name)}:{f.get('name', '?')}"
    f = frames[0]
    return f"{os.path.basename(f.get('filename', '?'))}:{f.get('name', '?')}"


def analyse(path, device=None):
    with open(path, "rb") as fh:
        snap = pickle.load(fh)
    traces = snap["device_traces"]
    if device is None:
        device = max(range(len(traces)), key=lambda d: len(traces[d]))
    live = {}  # addr -> (size, frames)
    for seg in snap["segments"]:
        if seg.get("device", device) != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            addr = b.get("address", addr)
            if b["state"] == "active_allocated":
                live[addr] = (b["size"], b.get("frames", []))
            addr += b["size"]
    events = [e for e in traces[device] if e["action"] in ("alloc", "free_completed")]
    # Backwards: undo each event, keeping the total after it.
    total = sum(s for s, _ in live.values())
    totals = [0] * len(events)
    for i in range(len(events) - 1, -1, -1):
        totals[i] = total
        e = events[i]
        if e["action"] == "alloc":
            live.pop(e["addr"], None)
            total -= e["size"]
        else:
            live[e["addr"]] = (e["size"], e.get("frames", []))
            total += e["size"]
    if not events:
        return None
    peak_i = max(range(len(events)), key=lambda i: totals[i])
    # Forwards again to the peak.
    for e in events[:peak_i + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], e.get("frames", []))
        else:
            live.pop(e["addr"], None)
    groups = collections.defaultdict(lambda: [0, 0])
    for size, frames in live.values():
        g = groups[label(frames)]
        g[0] += size
        g[1] += 1
    return totals[peak_i], events[peak_i], groups


def main():
    for path in sys.argv[1:]:
        got = analyse(path)
        if got is None:
            print(f"{path}: no events")
            continue
        peak, event, groups = got
        print(f"{path}: peak {peak / 2**30:.3f} GiB, reached by an allocation of "
              f"{event['size'] / 2**20:.1f} MiB at "
              f"{label(event.get('frames', []), 'a call without Python frames')}")
        for name, (size, count) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
            print(f"  {size / 2**30:8.3f} GiB  {count:4d} blocks  {name}")


if __name__ == "__main__":
    main()
