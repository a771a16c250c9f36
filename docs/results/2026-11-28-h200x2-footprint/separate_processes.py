# ours - raw from separate processes (--mode raw / --mode ours, call 3):
#   python3 separate_processes.py DIR  (DIR holding call3_sep_{raw,ours}_{1,2,3}.txt)
import re, sys, glob, collections
def load(f):
    r = {}
    for l in open(f):
        m = re.match(r'\[rank (\d)\]: (\w+)\s+\w+\s+(\d+)\s+\d+\s+([\d.]+)\s+\S+\s+\S+\s+\d+\s+([\d.]+)', l)
        if m: r[(int(m[1]), m[2], int(m[3]))] = (float(m[4]), float(m[5]))
    return r
d = sys.argv[1]
for i in (1, 2, 3):
    raw, ours = load(f'{d}/call3_sep_raw_{i}.txt'), load(f'{d}/call3_sep_ours_{i}.txt')
    for op in ('all_reduce', 'all_gather', 'reduce_scatter'):
        for rk in sorted({k[0] for k in raw}):
            ks = [k for k in raw if k[1] == op and k[0] == rk and 16 <= k[2] <= 65536]
            diffs = [ours[k][0] - raw[k][0] for k in ks]
            rows = [k for k in raw if k[1] == op and k[0] == rk and k[2] <= 65536]
            within = sum(ours[k][0] - raw[k][0] <= 1.0 for k in rows)
            mb = (rk, op, 1048576)
            print(f'run {i} rank {rk} {op:15s} mean {sum(diffs)/len(diffs):+.2f}  rows within 1us {within}/{len(rows)}  1MB {ours[mb][0]-raw[mb][0]:+.2f}  raw 4B {raw[(rk,op,min(k[2] for k in rows))][0]:.2f} host {raw[(rk,op,min(k[2] for k in rows))][1]:.2f}')
