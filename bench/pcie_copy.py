# The host<->GPU link alone, as the offloaded optimizer uses it: pinned host
# memory to the GPU, back, and both directions at once (two streams), 1 GiB
# copies. One of the three floors of an offloaded step (docs/benchmarks.md).
# Prints one "RESULT {json}" line of GB/s.
#   python3 bench/pcie_copy.py
import json

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

    res = {"h2d_GBps": rate(copies(True, False), 1), "d2h_GBps": rate(copies(False, True), 1),
           "both_GBps": rate(copies(True, True), 2)}
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
