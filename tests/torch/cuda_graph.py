"""Collectives of the rtd backend captured into a CUDA graph (under dtrun,
2 ranks), as torch.cuda.graph captures them: all_reduce (a small tensor, and
one of the size the copy engines take outside a capture), all_gather and
reduce_scatter, synchronous and async with wait(); the graph replays with
the right values three times, and the communicator stays usable for eager
calls after its watchdog saw the captured ones; the graph is destroyed
before the process group, as NCCL's finalize needs. Prints "cuda graph: ok" on
rank 0."""

import os
import time

import torch
import torch.distributed as dist

import rt_dist.torch  # noqa: F401

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("rtd")
rank, n = dist.get_rank(), dist.get_world_size()
total = float(n * (n + 1) // 2)  # the sum of rank + 1 over the ranks

small = torch.zeros(1024, device="cuda")
big = torch.zeros(4 << 20, device="cuda")  # 16 MiB: staged by copy engines when eager
shard = torch.zeros(1 << 20, device="cuda")
gathered = torch.zeros(n << 20, device="cuda")
scattered = torch.zeros(1 << 20, device="cuda")


def step():
    small.fill_(rank + 1.0)
    big.fill_(rank + 1.0)
    shard.fill_(rank + 1.0)
    dist.all_reduce(small)
    dist.all_reduce(big)
    dist.all_gather_into_tensor(gathered, shard, async_op=True).wait()
    dist.reduce_scatter_tensor(scattered, gathered)


def check(when):
    want_gathered = torch.arange(1, n + 1, device="cuda").repeat_interleave(1 << 20).float()
    for name, got, want in (("all_reduce small", small, torch.full_like(small, total)),
                            ("all_reduce big", big, torch.full_like(big, total)),
                            ("all_gather", gathered, want_gathered),
                            ("reduce_scatter", scattered,
                             torch.full_like(scattered, n * (rank + 1.0)))):
        if not torch.equal(got, want):
            raise AssertionError(f"rank {rank}, {when}: {name} gave {got[:4].tolist()}..., "
                                 f"want {want[:4].tolist()}...")


# Warm up on a side stream, as torch.cuda.graph's documentation asks: each
# size's first call sets up its path eagerly.
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    step()
torch.cuda.current_stream().wait_stream(side)
torch.cuda.synchronize()
check("eager")

graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    step()
for replay in range(3):
    for t in (small, big, gathered, scattered):
        t.zero_()
    graph.replay()
    torch.cuda.synchronize()
    check(f"replay {replay}")

time.sleep(0.5)  # the watchdog polls at least every 100 ms
step()
torch.cuda.synchronize()
check("eager after the graph")
# NCCL's finalize waits for every graph that captured its calls: gone first.
del graph
dist.barrier()
if rank == 0:
    print("cuda graph: ok", flush=True)
dist.destroy_process_group()
