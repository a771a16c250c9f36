# Per file and op: raw NCCL's mean us from 16 B to 64 KB, and each row's mean excess over raw
# (raw_end, raw_end_drv, raw_fork, ours), the largest ours-raw row, and ours-raw at 1 MB.
#   python3 summarize_means.py FILES
import sys,re,collections
for f in sys.argv[1:]:
    rows=collections.defaultdict(dict)
    for l in open(f):
        m=re.match(r'\[rank 0\]: (\w+)/(\w+)\s+\w+\s+(\d+)\s+\d+\s+([\d.]+)\s+\S+\s+\S+\s+\d+\s+([\d.]+)',l)
        if m: rows[(m[1],int(m[3]))][m[2]]=(float(m[4]),float(m[5]))
    ops=sorted(set(o for o,_ in rows))
    for op in ops:
        ks=[b for (o,b) in rows if o==op and 16<=b<=65536]
        var=[v for v in rows[(op,ks[0])] if v!='raw']
        s=" ".join(f"{v}-raw {sum(rows[(op,b)][v][0]-rows[(op,b)]['raw'][0] for b in ks)/len(ks):+.2f}" for v in var)
        mx=max(rows[(op,b)]['ours'][0]-rows[(op,b)]['raw'][0] for b in ks)
        big=rows.get((op,1048576))
        bs=f" 1MB ours-raw {big['ours'][0]-big['raw'][0]:+.2f}" if big else ""
        raw=sum(rows[(op,b)]['raw'][0] for b in ks)/len(ks)
        print(f"{f.split('/')[-1]:14s} {op:15s} raw {raw:5.2f} {s} max {mx:+.2f}{bs}")
