"""Names the host samples that `collective_bench --sample-host FILE` wrote
(one sample a line, "module+0xoffset" frames, leaf first) with addr2line,
against unstripped copies of the modules, and prints where the time went:
each function's share of the samples as the leaf (self), as the innermost
frame of our own modules (librt_dist and the benchmark: what called into
libc, CUDA or NCCL), and anywhere on the stack (total, each function once a
sample).

    python3 bench/host_profile.py SAMPLES DIR [DIR ...]   (DIRs: where the unstripped modules are)

Modules not found are counted as one function each, named by the module,
unless a DIR holds MODULE.nm, the module's exported symbols as
`nm -D --defined-only -n MODULE` lists them on the machine that ran it: each
frame is then named by the nearest exported symbol below it (libc's malloc,
memcpy, pthread_mutex_lock), marked with a "~".
"""
import bisect
import collections
import os
import subprocess
import sys


def find(module, dirs):
    for d in dirs:
        for root, _, files in os.walk(d):
            if module in files:
                return os.path.join(root, module)
    return None


def exported_symbols(nm_path):
    """(addresses, names) sorted, from `nm -D --defined-only -n` output."""
    if not nm_path:
        return [], []
    addrs, syms = [], []
    for line in open(nm_path):
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWwi":
            addrs.append(int(parts[0], 16))
            syms.append(parts[2])
    return addrs, syms


def nearest(exported, offset):
    addrs, syms = exported
    i = bisect.bisect_right(addrs, offset) - 1
    return f"~{syms[i]}" if i >= 0 else None


def symbolize(frames, dirs):
    by_module = collections.defaultdict(set)
    for f in frames:
        module, _, off = f.rpartition("+")
        by_module[module].add(off)
    names = {}
    for module, offs in by_module.items():
        path = find(module, dirs)
        offs = sorted(offs)
        if not path:
            exported = exported_symbols(find(module + ".nm", dirs))
            for o in offs:
                names[f"{module}+{o}"] = nearest(exported, int(o, 16)) or f"[{module}]"
            continue
        out = subprocess.run(["addr2line", "-f", "-C", "-e", path], input="\n".join(offs),
                             capture_output=True, text=True).stdout.splitlines()
        for i, o in enumerate(offs):
            fn = out[2 * i] if 2 * i < len(out) else "??"
            names[f"{module}+{o}"] = fn if fn != "??" else f"[{module}]"
    return names


def main(path, dirs):
    samples = [line.split() for line in open(path) if line.strip()]
    names = symbolize({f for s in samples for f in s}, dirs)
    self_count, ours, total = collections.Counter(), collections.Counter(), collections.Counter()
    for s in samples:
        stack = [names[f] for f in s]
        self_count[stack[0]] += 1
        mine = [names[f] for f in s if f.startswith(("librt_dist", "collective_bench"))]
        ours[mine[0] if mine else stack[0]] += 1
        for fn in set(stack):
            total[fn] += 1
    n = len(samples)
    print(f"{n} samples")
    print("self %   function")
    for fn, c in self_count.most_common(25):
        print(f"{100 * c / n:6.1f}   {fn[:150]}")
    print("ours %   innermost function of ours")
    for fn, c in ours.most_common(25):
        print(f"{100 * c / n:6.1f}   {fn[:150]}")
    print("total %  function")
    for fn, c in total.most_common(40):
        print(f"{100 * c / n:6.1f}   {fn[:150]}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
