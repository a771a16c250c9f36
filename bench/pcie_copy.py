# The host<->GPU link alone, as the offloaded optimizer uses it: pinned host
# memory to the GPU, back, and both directions at once (two streams), 1 GiB
# copies. One of the three floors of an offloaded step (411ccc3:docs/benchmarks.md).
# Prints one "RESULT {json}" line of GB/s.
#   python3 bench/pcie_copy.py
# As a load beside another benchmark (the offloaded step's copies, while the
# host AdamW runs): copies both ways for SECONDS, at most GBPS in all (0: as
# fast as the link goes), then prints what it moved.
#   python3 bench/pcie_copy.py --load SECONDS [--gbps GBPS]
import argparse
import json
import time

import torch


def rate(step, gib_per_step, reps=5):
    """GB/s of `step` (queues copies, then makes the current stream wait for them)."""
    step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    start.record()
    for _ in range(reps):
        step()
    end.record()
    torch.cuda.synchronize()
    return gib_per_step * reps * (1 << 30) / (start.elapsed_time(end) / 1e3) / 1e9


def main():
    n = 1 << 30
    host_in = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host_out = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev_a = torch.empty(n, dtype=torch.uint8, device="cuda")
    dev_b = torch.empty(n, dtype=torch.uint8, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def copies(to_gpu, to_host):
        def step():
            for s in (s1, s2):
                s.wait_stream(torch.cuda.current_stream())
            if to_gpu:
                with torch.cuda.stream(s1):
                    dev_a.copy_(host_in, non_blocking=True)
            if to_host:
                with torch.cuda.stream(s2):
                    host_out.copy_(dev_b, non_blocking=True)
            for s in (s1, s2):
                torch.cuda.current_stream().wait_stream(s)
        return step

    args = parse_args()
    if args.load > 0:
        load(copies(True, True), args.load, args.gbps)
        return
    res = {"h2d_GBps": rate(copies(True, False), 1), "d2h_GBps": rate(copies(False, True), 1),
           "both_GBps": rate(copies(True, True), 2)}
    print("RESULT " + json.dumps(res), flush=True)


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--load", type=float, default=0, help="copy both ways for this many seconds")
    p.add_argument("--gbps", type=float, default=0,
                   help="at most this many GB/s in all (0: no cap)")
    return p.parse_args()


def load(step, seconds, gbps):
    """Copies 2 GiB a step (1 GiB each way) for `seconds`, paced to `gbps`."""
    per_step = 2 * (1 << 30) / 1e9
    start = time.time()
    steps = 0
    while time.time() - start < seconds:
        step()
        torch.cuda.synchronize()
        steps += 1
        if gbps > 0:
            ahead = start + steps * per_step / gbps - time.time()
            if ahead > 0:
                time.sleep(ahead)
    spent = time.time() - start
    print("LOAD " + json.dumps({"seconds": round(spent, 1),
                                "GBps": round(steps * per_step / spent, 1)}),
          flush=True)


if __name__ == "__main__":
    main()
