"""Where a profiled step's GPU time goes, from torch.profiler's Chrome trace
(bench/torch_backend.py's PROFILE=DIR writes one per configuration).

    python bench/trace_summary.py [--window FROM TO] [--list] TRACE.json[.gz] [...]

For each trace: every CUDA stream's busy time (kernels, copies, memsets) and
its largest items; for the compute stream (the one with the most GEMM time),
its idle time between the first and last item and the longest idle gaps with
what ran before and after each, and the GEMMs' total time (more than a run
without transfers means the transfers slowed them; more idle means the
compute waited for them). --window FROM TO keeps the GPU items that start
between FROM and TO ms after the trace's first (one step of several: the
first profiled step starts from an idle GPU); --list also prints each of
them in time order (start, length, stream, name), to see which stream the
compute stream's idle waits on.
"""
import gzip
import json
import sys
from collections import defaultdict

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def is_gemm(name):
    return name.startswith(("nvjet", "sm90_xmma", "cutlass")) or "gemm" in name.lower()


def summarize(path, window=None, listed=False, gaps_shown=12):
    events = [e for e in load(path).get("traceEvents", [])
              if e.get("ph") == "X" and e.get("cat") in GPU_CATS and "stream" in e.get("args", {})]
    if events and window:
        first = min(e["ts"] for e in events)
        events = [e for e in events if window[0] <= (e["ts"] - first) / 1e3 < window[1]]
    if not events:
        print(f"{path}: no GPU events")
        return
    by_stream = defaultdict(list)
    for e in events:
        by_stream[e["args"]["stream"]].append(e)
    gemm_time = {s: sum(e["dur"] for e in es if is_gemm(e["name"])) for s, es in by_stream.items()}
    compute = max(gemm_time, key=gemm_time.get)
    t0 = min(e["ts"] for e in events)
    t1 = max(e["ts"] + e["dur"] for e in events)
    print(f"== {path}: {len(events)} GPU items over {(t1 - t0) / 1e3:.2f} ms")
    for s, es in sorted(by_stream.items(), key=lambda kv: -sum(e["dur"] for e in kv[1])):
        names = defaultdict(float)
        for e in es:
            names[e["name"][:60]] += e["dur"]
        top = sorted(names.items(), key=lambda kv: -kv[1])[:4]
        busy = sum(e["dur"] for e in es)
        print(f"stream {s}{' (compute)' if s == compute else ''}: busy {busy / 1e3:.2f} ms, "
              f"{len(es)} items; " + "; ".join(f"{n} {d / 1e3:.2f}" for n, d in top))
    es = sorted(by_stream[compute], key=lambda e: e["ts"])
    gaps = []
    for a, b in zip(es, es[1:]):
        gap = b["ts"] - (a["ts"] + a["dur"])
        if gap > 0:
            gaps.append((gap, a["name"][:50], b["name"][:50], (a["ts"] + a["dur"] - t0) / 1e3))
    idle = sum(g[0] for g in gaps)
    span = es[-1]["ts"] + es[-1]["dur"] - es[0]["ts"]
    print(f"compute stream {compute}: span {span / 1e3:.2f} ms, idle {idle / 1e3:.2f} ms "
          f"({sum(1 for g in gaps if g[0] > 20)} gaps over 20 us), "
          f"GEMMs {gemm_time[compute] / 1e3:.2f} ms "
          f"in {sum(1 for e in es if is_gemm(e['name']))} kernels")
    for gap, before, after, at in sorted(gaps, reverse=True)[:gaps_shown]:
        print(f"  idle {gap / 1e3:7.3f} ms at {at:8.2f} ms: after {before} | before {after}")
    if listed:
        for e in sorted(events, key=lambda e: e["ts"]):
            print(f"  {(e['ts'] - t0) / 1e3:8.3f} {e['dur'] / 1e3:7.3f} s{e['args']['stream']:<4} "
                  f"{e['name'][:70]}")


if __name__ == "__main__":
    args = sys.argv[1:]
    window, listed = None, False
    while args and args[0].startswith("--"):
        if args[0] == "--window":
            try:
                window = (float(args[1]), float(args[2]))
            except (IndexError, ValueError):
                sys.exit("trace_summary: --window takes two times in ms, FROM and TO")
            args = args[3:]
        elif args[0] == "--list":
            listed, args = True, args[1:]
        else:
            sys.exit(f"trace_summary: unknown option {args[0]}")
    for p in args:
        summarize(p, window, listed)
