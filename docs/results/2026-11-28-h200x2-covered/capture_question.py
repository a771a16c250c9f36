"""The driver's capture question on each host: raw_end_cap - raw_end_drv per
row of 4 B-64 KB (one row per size, op and process), median and quartiles."""
import glob, re, statistics as st, sys

for label, pattern in (a.split("=", 1) for a in sys.argv[1:]):
    by = {}
    for path in sorted(glob.glob(pattern)):
        for line in open(path):
            m = re.match(r"\[rank 0\]: (\w+)/(\w+)\s+float32\s+(\d+)\s+\d+\s+([\d.]+)", line)
            if m and int(m.group(3)) <= 65536:
                by[(path, m.group(1), m.group(3), m.group(2))] = float(m.group(4))
    d = [v - by[k[:3] + ("raw_end_drv",)] for k, v in by.items() if k[3] == "raw_end_cap"]
    if len(d) < 4:
        continue
    q = st.quantiles(d, n=4)
    print(f"{label:8s} capture question {st.median(d):+.2f} us [quartiles {q[0]:+.2f}..{q[2]:+.2f}]"
          f"  rows {len(d)}")
