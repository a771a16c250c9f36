"""Mean power and clocks of each GPU over each timed window of a benchmark:
    nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw \\
        --format=csv,noheader,nounits -lms 50 > smi.csv &
    WINDOWS=1 ... python bench/torch_backend.py > bench.txt
    python bench/power_windows.py smi.csv bench.txt
Prints, per window ("<configuration>: timed steps from T0 to T1"), the
samples in it, mean W and SM MHz per GPU, and joules a step when the
benchmark's step time for that configuration is in the log. nvidia-smi's
timestamps are the machine's local time (UTC on the GPU machine; TZ to
say otherwise)."""

import datetime
import re
import sys


def samples(path):
    out = []
    with open(path) as fh:
        lines = fh.read().splitlines()
    for line in lines:
        f = [x.strip() for x in line.split(",")]
        if len(f) < 5:
            continue
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f")
            t = t.replace(tzinfo=datetime.timezone.utc).timestamp()
            out.append((t, int(f[1]), float(f[2]), float(f[3]), float(f[4])))
        except ValueError:
            continue  # a header or a cut line
    return out


def windows(path):
    """Rank 0's timed windows (tag, t0, t1), and its step times in ms by tag."""
    got, steps = [], {}
    with open(path) as f:
        lines = f.read().splitlines()
    for line in lines:
        m = re.search(r"\]: (\S+): timed steps from ([\d.]+) to ([\d.]+)", line)
        if m and line.startswith("[rank 0]"):
            got.append((m.group(1), float(m.group(2)), float(m.group(3))))
            continue
        m = re.search(r"\[rank 0\]: (\S+) (\S+) step ([\d.]+) ms", line)
        if m:
            steps[f"{m.group(1)}_{m.group(2)}"] = float(m.group(3))
        m = re.search(r"\[rank 0\]: single-GPU step ([\d.]+) ms", line)
        if m:
            steps["single"] = float(m.group(1))
    return got, steps


def main():
    smi = samples(sys.argv[1])
    wins, steps = windows(sys.argv[2])
    for tag, t0, t1 in wins:
        gpus = sorted({s[1] for s in smi})
        parts = []
        for g in gpus:
            inside = [s for s in smi if s[1] == g and t0 <= s[0] <= t1]
            if not inside:
                parts.append(f"GPU {g}: no samples")
                continue
            watts = sum(s[4] for s in inside) / len(inside)
            sm = sum(s[2] for s in inside) / len(inside)
            text = f"GPU {g}: {len(inside)} samples, {watts:.0f} W, SM {sm:.0f} MHz"
            if tag in steps:
                text += f", {watts * steps[tag] / 1e3:.1f} J/step"
            parts.append(text)
        print(f"{tag} ({(t1 - t0):.2f} s): " + "; ".join(parts))


if __name__ == "__main__":
    main()
