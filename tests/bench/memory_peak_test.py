"""bench/memory_peak.py on a made-up snapshot whose peak is known: blocks
older than the recording (one freed during it), blocks allocated and freed
during it, and the dump's live blocks. Run: python3 memory_peak_test.py."""

import importlib.util
import os
import pickle
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "memory_peak", os.path.join(here, "..", "..", "bench", "memory_peak.py"))
memory_peak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(memory_peak)


def frames(name):
    return [{"filename": "/x/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py",
             "name": name, "line": 1}]


# Before the recording: A (100 bytes, still live at the dump) and E (50,
# freed during it). During it: D (400) allocated and freed, C (30) allocated
# and live at the dump. Peak: A + D + C = 530, at C's allocation.
snapshot = {
    "segments": [{"device": 0, "address": 1000, "blocks": [
        {"address": 1000, "size": 100, "state": "active_allocated", "frames": []},
        {"address": 1100, "size": 50, "state": "inactive", "frames": []},
        {"address": 1150, "size": 30, "state": "active_allocated", "frames": frames("late")},
    ]}],
    "device_traces": [[
        {"action": "free_requested", "addr": 1100, "size": 50, "frames": []},
        {"action": "free_completed", "addr": 1100, "size": 50, "frames": []},
        {"action": "alloc", "addr": 5000, "size": 400, "frames": frames("big")},
        {"action": "alloc", "addr": 1150, "size": 30, "frames": frames("late")},
        {"action": "free_requested", "addr": 5000, "size": 400, "frames": frames("big")},
        {"action": "free_completed", "addr": 5000, "size": 400, "frames": frames("big")},
    ]],
}
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "snap.pickle")
    with open(path, "wb") as f:
        pickle.dump(snapshot, f)
    peak, event, groups = memory_peak.analyse(path)
want = {"before the recording": [100, 1], "_fsdp_collectives.py:big": [400, 1],
        "_fsdp_collectives.py:late": [30, 1]}
if peak != 530 or event["addr"] != 1150 or {k: list(v) for k, v in groups.items()} != want:
    sys.exit(f"memory_peak: peak {peak} at {event['addr']}, groups {dict(groups)}; "
             f"expected 530 at 1150, {want}")
print("memory_peak: ok")
