"""At 1 MB, ours and raw NCCL with an end event after every call (raw_end:
the runtime's record; raw_end_drv: the driver's), each minus raw, over the
processes of the 1 MB runs: mean, median, standard deviation and how many
within 0.5 us.

    python3 against_raw_end.py LABEL=GLOB[,GLOB...] [LABEL=GLOB ...]
"""
import glob
import statistics
import sys

OPS = ("all_reduce", "all_gather", "reduce_scatter")
ROWS = ("ours", "raw_end", "raw_end_drv")


def one_mb(path):
    t = {}
    for line in open(path):
        f = line.split()
        if len(f) > 6 and f[4] == "1048576" and "/" in f[2]:
            t[f[2]] = float(f[6])
    return t


for arg in sys.argv[1:]:
    label, pats = arg.split("=", 1)
    files = sorted(f for pat in pats.split(",") for f in glob.glob(pat))
    per = [one_mb(p) for p in files]
    print(f"{label}: {len(files)} processes")
    for op in OPS:
        for row in ROWS:
            d = [t[f"{op}/{row}"] - t[f"{op}/raw"] for t in per if f"{op}/{row}" in t]
            if len(d) < 2:
                continue
            within = sum(1 for x in d if x <= 0.5)
            print(f"  {op:15} {row:12} mean {statistics.mean(d):+.2f} "
                  f"median {statistics.median(d):+.2f} sd {statistics.stdev(d):.2f} "
                  f"within 0.5: {within}/{len(d)}")
