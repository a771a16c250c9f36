"""The host's cost of FSDP2-sized gathers and reductions, per call, on the
nccl and the rtd backend (2 GPUs, one host):
    dtrun --nproc-per-node=2 python bench/torch_shard_cost.py
For each size (a unit of H x H bf16 parameters: its all-gather, and the
reduce-scatter of its fp32 gradients), synchronous calls as FSDP2 makes them
(the caller's stream waits; the host does not): microseconds of host time
to issue one, and per call in all once the GPU is done; on rtd also through
buffers lent by the group (rt_dist.torch.fsdp_comms' path). Env: SIZES
(H values, default "2048 8192"), CALLS (default 200).
"""

import os
import time

import torch
import torch.distributed as dist

import rt_dist.torch  # noqa: F401


def log(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


def timed(call, calls):
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    host = (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    total = (time.perf_counter() - t0) / calls
    return host * 1e6, total * 1e6


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl")
    n, rank = dist.get_world_size(), dist.get_rank()
    groups = {"nccl": dist.new_group(backend="nccl"), "rtd": dist.new_group(backend="rtd")}
    calls = int(os.environ.get("CALLS", "200"))
    for h in (int(s) for s in os.environ.get("SIZES", "2048 8192").split()):
        numel = h * h
        for name, g in groups.items():
            out = torch.empty(numel, dtype=torch.bfloat16, device=dev)
            inp = out.narrow(0, rank * numel // n, numel // n)
            grads = torch.randn(numel, device=dev)
            red = torch.empty(numel // n, device=dev)
            ag = timed(lambda: dist.all_gather_into_tensor(out, inp, group=g), calls)
            rs = timed(lambda: dist.reduce_scatter_tensor(red, grads, group=g), calls)
            log(f"H={h} {name}: all_gather {ag[0]:.1f} us host, {ag[1]:.1f} us a call; "
                f"reduce_scatter {rs[0]:.1f} us host, {rs[1]:.1f} us a call")
            if name == "rtd":
                lent = g.lend_shard_buffer("all_gather", numel, torch.bfloat16, dev)
                mine = lent.narrow(0, rank * numel // n, numel // n)
                lent_grads = g.lend_shard_buffer("reduce_scatter", numel, torch.float32, dev)
                lent_grads.copy_(grads)
                ag = timed(lambda: g.shard_collective("all_gather", lent, mine).wait(), calls)
                rs = timed(lambda: g.shard_collective("reduce_scatter", red, lent_grads).wait(),
                           calls)
                log(f"H={h} rtd, lent buffers: all_gather {ag[0]:.1f} us host, {ag[1]:.1f} us a "
                    f"call; reduce_scatter {rs[0]:.1f} us host, {rs[1]:.1f} us a call")
                del lent, mine, lent_grads
                g.release_shard_buffers()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
