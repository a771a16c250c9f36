"""The method of each staged site chosen in the job (under dtrun, 2 GPUs,
RTD_TORCH_COPY_ENGINES=1): a step of an all-gather, a reduce-scatter and an
all-reduce, each of one size, repeated past the sites' measurements (8
calls each) and checked at every call: ranks that chose differently would
hang or return wrong values. tests/torch/check_choice_log.py then reads the
log: the same choice, with the same agreed timings, on every rank. Prints
"method choice: ok" on rank 0."""

import os

import torch
import torch.distributed as dist

import rt_dist.torch  # noqa: F401

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("rtd")
rank, n = dist.get_rank(), dist.get_world_size()
count = 2 << 20  # floats: 8 MiB, above the 1 MiB where staging starts

for step in range(20):
    shard = torch.full((count,), float(rank + step), device="cuda")
    gathered = torch.empty(n * count, device="cuda")
    dist.all_gather_into_tensor(gathered, shard)
    want = torch.arange(n, device="cuda").repeat_interleave(count).float() + step
    if not torch.equal(gathered, want):
        raise AssertionError(f"rank {rank} step {step}: all_gather wrong")
    full = torch.full((n * count,), float(rank + 1), device="cuda")
    part = torch.empty(count, device="cuda")
    dist.reduce_scatter_tensor(part, full)
    if not torch.all(part == n * (n + 1) / 2):
        raise AssertionError(f"rank {rank} step {step}: reduce_scatter wrong")
    grad = torch.full((count,), float(rank + step), device="cuda")
    dist.all_reduce(grad)
    if not torch.all(grad == sum(r + step for r in range(n))):
        raise AssertionError(f"rank {rank} step {step}: all_reduce wrong")
torch.cuda.synchronize()
dist.barrier()
if rank == 0:
    print("method choice: ok", flush=True)
dist.destroy_process_group()
