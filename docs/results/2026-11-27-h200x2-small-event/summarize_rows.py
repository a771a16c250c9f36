# Per row (op, bytes): the median over processes of ours - raw.
#   python3 summarize_rows.py "GLOB" ...
import re,glob,collections,statistics as st,sys
def load(f):
    rows=collections.defaultdict(dict)
    for l in open(f):
        m=re.match(r'\[rank 0\]: (\w+)/(\w+)\s+\w+\s+(\d+)\s+\d+\s+([\d.]+)',l)
        if m: rows[(m[1],int(m[3]))][m[2]]=float(m[4])
    return rows
for pat in sys.argv[1:]:
    fs=sorted(glob.glob(pat)); per=collections.defaultdict(list)
    for f in fs:
        for k,v in load(f).items(): per[k].append(v['ours']-v['raw'])
    print(pat, len(fs), "processes: median over processes of ours-raw per row")
    for op in ['all_reduce','all_gather','reduce_scatter']:
        print("  %-14s"%op, " ".join("%s:%+.2f"%(b if b<1024 else str(b//1024)+'K', st.median(per[(op,b)])) for b in sorted(b for o,b in per if o==op)))
