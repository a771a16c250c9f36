"""bench/trace_summary.py on a made-up Chrome trace of two steps: the compute
stream's idle time and gaps, whole and within --window, and --list's items.
Run: python3 trace_summary_test.py."""

import gzip
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
script = os.path.join(here, "..", "..", "bench", "trace_summary.py")


def item(name, stream, start_ms, length_ms, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": 1000.0 + start_ms * 1e3,
            "dur": length_ms * 1e3, "args": {"stream": stream}}


# Two steps 10 ms apart on stream 7 (GEMMs), a copy on stream 9 in each. Step 1
# idles 1.0 ms before its second GEMM (and 1.0 ms after it, before step 2),
# step 2 idles 0.25 ms.
events = []
for step, idle in ((0, 1.0), (1, 0.25)):
    t = step * 10.0
    events += [item("nvjet_gemm_a", 7, t, 4.0),
               item("nvjet_gemm_b", 7, t + 4.0 + idle, 4.0),
               item("Memcpy PtoP", 9, t + 1.0, 2.0, "gpu_memcpy")]
events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1000.0, "dur": 5.0})


def run(*args):
    out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "trace.json.gz")
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    whole = run(path)
    assert "6 GPU items over" in whole, whole
    assert "compute stream 7: span 18.25 ms, idle 2.25 ms (3 gaps" in whole, whole
    assert whole.count("idle   1.000 ms") == 2 and "idle   0.250 ms" in whole, whole
    second = run("--window", "10", "20", path)
    assert "3 GPU items over 8.25 ms" in second, second
    assert "idle 0.25 ms" in second and "idle   1.000 ms" not in second, second
    listed = run("--window", "10", "20", "--list", path)
    rows = [line.split() for line in listed.splitlines() if line.startswith("    ")]
    assert [r[2:] for r in rows] == [["s7", "nvjet_gemm_a"], ["s9", "Memcpy", "PtoP"],
                                     ["s7", "nvjet_gemm_b"]], listed
    assert [r[0] for r in rows] == ["0.000", "1.000", "4.250"], listed
    bad = subprocess.run([sys.executable, script, "--windo", path], capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "unknown option --windo" in bad.stderr, bad
    bad = subprocess.run([sys.executable, script, "--window", "10", path], capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "two times in ms" in bad.stderr, bad
print("trace_summary: whole trace, one step's window and its items in order")
