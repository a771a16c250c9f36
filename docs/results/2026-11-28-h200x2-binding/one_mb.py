"""ours - raw at 1 MB per process (the paired sweeps' 1 MB rows and the
1 MB-only runs), per library and call: each process's figure, how many
within 0.5 us, and the mean and median over the processes.

    python3 one_mb.py LABEL=GLOB [LABEL=GLOB ...]
"""
import glob
import statistics
import sys

OPS = ("all_reduce", "all_gather", "reduce_scatter")


def one_mb(path):
    t = {}
    for line in open(path):
        f = line.split()
        if len(f) > 6 and f[4] == "1048576" and "/" in f[2]:
            t[f[2]] = float(f[6])
    return {op: t[op + "/ours"] - t[op + "/raw"] for op in OPS if op + "/ours" in t}


for arg in sys.argv[1:]:
    label, pat = arg.split("=", 1)
    files = sorted(glob.glob(pat))
    per = [one_mb(p) for p in files]
    for op in OPS:
        d = [p[op] for p in per if op in p]
        if not d:
            continue
        within = sum(1 for x in d if x <= 0.5)
        print(f"{label:10} {op:15} n={len(d):2} within 0.5: {within:2}/{len(d):2}  "
              f"mean {statistics.mean(d):+.2f} median {statistics.median(d):+.2f}  "
              f"[{' '.join(f'{x:+.2f}' for x in sorted(d))}]")
