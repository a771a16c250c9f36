# Per set of files and op: the range over processes of ours - raw's mean over
# 16 B-64 KB, how many rows from 4 B to 64 KB are within 1 us of raw, and
# ours - raw at 1 MB. With --delay: each file's raw_delay and ours against
# raw_end_drv, on the device timeline and in host time.
#   python3 summarize_targets.py LABEL=GLOB ...
#   python3 summarize_targets.py --delay FILES
import collections, glob, re, sys

def load(f):
    rows = collections.defaultdict(dict)
    for l in open(f):
        m = re.match(r'\[rank 0\]: (\w+)/(\w+)\s+\w+\s+(\d+)\s+\d+\s+([\d.]+)\s+\S+\s+\S+\s+\d+\s+([\d.]+)', l)
        if m: rows[(m[1], int(m[3]))][m[2]] = (float(m[4]), float(m[5]))
    return rows

OPS = ['all_reduce', 'all_gather', 'reduce_scatter']
if sys.argv[1] == '--delay':
    for f in sys.argv[2:]:
        r = load(f)
        for op in OPS:
            ks = [b for (o, b) in r if o == op and 16 <= b <= 65536]
            def mean(v, i=0, base='raw_end_drv'):
                return sum(r[(op, b)][v][i] - r[(op, b)][base][i] for b in ks) / len(ks)
            print(f"{f.split('/')[-1]:22s} {op:15s} vs raw_end_drv: time raw_delay {mean('raw_delay'):+.2f} "
                  f"ours {mean('ours'):+.2f}; host raw_delay {mean('raw_delay', 1):+.2f} ours {mean('ours', 1):+.2f}; "
                  f"raw_end_drv-raw {mean('raw_end_drv', 0, 'raw'):+.2f} ours-raw {mean('ours', 0, 'raw'):+.2f}")
    sys.exit()
for arg in sys.argv[1:]:
    label, pat = arg.split('=', 1)
    for op in OPS:
        n = ok = 0; means = []; mb = []
        for f in sorted(glob.glob(pat)):
            r = load(f); ks = [b for (o, b) in r if o == op and 4 <= b <= 65536]
            d = [r[(op, b)]['ours'][0] - r[(op, b)]['raw'][0] for b in ks]
            n += len(d); ok += sum(x <= 1.0 for x in d)
            ks16 = [b for b in ks if b >= 16]
            means.append(sum(r[(op, b)]['ours'][0] - r[(op, b)]['raw'][0] for b in ks16) / len(ks16))
            big = r[(op, 1048576)]; mb.append(big['ours'][0] - big['raw'][0])
        print(f"{label:14s} {op:15s} ours-raw means {min(means):+.2f}..{max(means):+.2f} (avg {sum(means)/len(means):+.2f}); "
              f"rows within 1 us {ok}/{n}; 1 MB {min(mb):+.2f}..{max(mb):+.2f} (within 0.5: {sum(x <= 0.5 for x in mb)}/{len(mb)})")
