# Per set of paired files and op: ours - raw_end_drv (raw NCCL with its end
# event recorded through the driver: what is left is our layer), the end
# event's own cost (raw_end_drv - raw), and raw's level; means over 16 B-64 KB
# per process, then their mean [least..most] over processes.
#   python3 against_end_event.py LABEL='GLOB' ...
import re, sys, glob, collections, statistics
def load(f):
    rows = collections.defaultdict(dict)
    for l in open(f):
        m = re.match(r'\[rank (\d)\]: (\w+)/(\w+)\s+\w+\s+(\d+)\s+\d+\s+([\d.]+)\s+\S+\s+\S+\s+\d+\s+([\d.]+)', l)
        if m: rows[(int(m[1]), m[2], int(m[4]))][m[3]] = (float(m[5]), float(m[6]))
    return rows
for arg in sys.argv[1:]:
    label, pat = arg.split('=')
    for op in ('all_reduce','all_gather','reduce_scatter'):
        a, b, c = [], [], []
        for f in sorted(glob.glob(pat)):
            r = load(f)
            for rk in (0, 1):
                ks = [k for k in r if k[0]==rk and k[1]==op and 16 <= k[2] <= 65536]
                if not ks: continue
                a.append(statistics.mean(r[k]['ours'][0]-r[k]['raw_end_drv'][0] for k in ks))
                b.append(statistics.mean(r[k]['raw_end_drv'][0]-r[k]['raw'][0] for k in ks))
                c.append(statistics.mean(r[k]['raw'][0] for k in ks))
        print(f"{label:6s} {op:15s} ours-raw_end_drv {statistics.mean(a):+.2f} [{min(a):+.2f}..{max(a):+.2f}]  end event {statistics.mean(b):+.2f}  raw {statistics.mean(c):.2f}  (n={len(a)})")
