"""What one small collective costs through torch.distributed, on nccl (or
gloo for host tensors) and on rtd, in one job:
    dtrun --nproc-per-node=2 python bench/torch_call_cost.py
For a 4-byte all_reduce: the host time to issue one (dist.all_reduce, and
the group's own allreduce called straight) and the time per call to the last
one done, over CALLS calls (default 5000), after 200 untimed. Env: DEVICES
(default "cuda cpu")."""

import os
import time

import torch
import torch.distributed as dist


def per_call(fn, calls, device):
    for _ in range(200):
        fn()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = time.perf_counter() - t0
    sync()
    done = time.perf_counter() - t0
    return issued / calls * 1e6, done / calls * 1e6


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("cpu:gloo,cuda:nccl")
    calls = int(os.environ.get("CALLS", "5000"))
    for device in os.environ.get("DEVICES", "cuda cpu").split():
        theirs = "nccl" if device == "cuda" else "gloo"
        for name in (theirs, "rtd"):
            g = dist.new_group(backend=name)
            x = torch.ones(1, device=device)
            backend = g._get_backend(torch.device(device))
            api = per_call(lambda: dist.all_reduce(x, group=g), calls, device)
            direct = per_call(lambda: backend.allreduce([x]).wait() if device == "cpu"
                              else backend.allreduce([x]), calls, device)
            if dist.get_rank() == 0:
                print(f"call_cost {device} {name:5}: dist.all_reduce 4 B issued in "
                      f"{api[0]:6.1f} us, done {api[1]:6.1f} us a call; the backend's "
                      f"allreduce straight: issued {direct[0]:6.1f} us, done {direct[1]:6.1f} us",
                      flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
