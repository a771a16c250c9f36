import re,sys,glob,collections,statistics as st
rows=collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1]+'/abl_*_*.txt')):
    m=re.search(r'abl_(\w+)_(\d+)\.txt',f); lib=m.group(1)
    for line in open(f):
        m=re.match(r'\[rank 0\]: (\w+)/(\w+)\s+float32\s+(\d+)\s+\d+\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+\d+\s+([\d.]+)',line)
        if m: rows[(lib,m.group(1),int(m.group(3)),m.group(2))].append((float(m.group(4)),float(m.group(5))))
libs=sys.argv[2].split(',')
ops=['all_reduce','all_gather','reduce_scatter']
sizes=sorted({k[2] for k in rows})
print('ours - raw (time), median over processes [min..max]; raw; raw_end_drv-raw; raw_end_cap-raw_end_drv')
for op in ops:
  for b in sizes:
    out=[]
    for lib in libs:
      o=rows[(lib,op,b,'ours')]; r=rows[(lib,op,b,'raw')]
      d=[x[0]-y[0] for x,y in zip(o,r)]
      out.append(f'{lib}:{st.median(d):+.2f}[{min(d):+.2f}..{max(d):+.2f}]')
    ev=[x[0]-y[0] for lib in libs for x,y in zip(rows[(lib,op,b,'raw_end_drv')],rows[(lib,op,b,'raw')])]
    cap=[x[0]-y[0] for lib in libs for x,y in zip(rows[(lib,op,b,'raw_end_cap')],rows[(lib,op,b,'raw_end_drv')])]
    raw=[x[0] for lib in libs for x in rows[(lib,op,b,'raw')]]
    print(f'{op[:6]:6s}{b:8d} raw {st.median(raw):.2f} ev {st.median(ev):+.2f} cap {st.median(cap):+.2f} | '+' '.join(out))
