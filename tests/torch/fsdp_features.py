"""FSDP2's less common features on the rtd backend, against the same script on
gloo (or nccl) in one process: the parameters must agree at the end (under
dtrun, 4 ranks on CPU; on GPUs 2, where the 2-D meshes are left out):
    dtrun --nproc-per-node=4 python tests/torch/fsdp_features.py [cpu|cuda] [steps]
Every case runs with rt_dist's comms set the way an unchanged script gets
them (RTD_TORCH_FSDP_COMMS, fully_shard setting the hooks itself); rank 0
prints each case with what went through the buffers lent to FSDP2.

- HSDP: a 2-D mesh, 2 replicas of 2 shards (reduce-scatter within a replica,
  all-reduce across);
- FSDP2 over TP: ColwiseParallel/RowwiseParallel on one mesh dimension,
  fully_shard on the other;
- parameters sharded on their second dimension (shard_placement_fn, Shard(1));
- gradient accumulation with set_requires_gradient_sync(False);
- reshard_after_forward=False, and resharding to 2 ranks after the forward;
- torch.compile of the sharded model (aot_eager: dynamo and AOTAutograd,
  no code generation);
- CPUOffloadPolicy (GPUs only: the parameters live on the host between uses);
- gradient clipping (clip_grad_norm_ over DTensors) in every case.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import rt_dist.torch  # noqa: F401  (under dtrun `import torch` has loaded it already)
from rtd_impl import IMPL
import small_mlp  # tests/torch/small_mlp.py

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
if device == "cuda":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.backends.cuda.matmul.allow_tf32 = False
dist.init_process_group("rtd")
rank, n = dist.get_rank(), dist.get_world_size()
REFERENCE = "nccl" if device == "cuda" else "gloo"
reference = dist.new_group(backend=REFERENCE)
AUTO = IMPL == "python" and rt_dist._config.switch("RTD_TORCH_FSDP_COMMS")
# On GPUs, FSDP2's calls under 1 MiB go the ordinary way (see _shard_slots).
H = int(os.environ.get("RTD_TRAIN_H", "64" if device == "cpu" else "1024"))


def model():
    return small_mlp.model(H, device)


def batch(step, micro=0):
    return small_mlp.batch(step, micro, rank, H, device)


def mesh_2d(backend):
    """A (2, n/2) mesh whose groups are of backend; every rank makes every group."""
    grid = torch.arange(n).reshape(2, n // 2)
    mine = {}
    for dim, lines in ((0, grid.t()), (1, grid)):
        for line in lines.tolist():
            g = dist.new_group(line, backend=backend)
            if rank in line:
                mine[dim] = g
    used.extend([mine[0], mine[1]])
    return DeviceMesh.from_group([mine[0], mine[1]], device, mesh=grid,
                                 mesh_dim_names=("outer", "inner"))


def shard(m, mesh, **kwargs):
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, **kwargs)
    fully_shard(m, mesh=mesh, **kwargs)
    return m


def train(m, micro_batches=1, sync_last_only=False):
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for step in range(steps):
        for micro in range(micro_batches):
            if sync_last_only:
                m.set_requires_gradient_sync(micro == micro_batches - 1)
            x, y = batch(step, micro)
            nn.functional.mse_loss(m(x).float(), y).backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    # On the host: CPUOffloadPolicy's parameters are there already.
    return torch.cat([p.full_tensor().detach().reshape(-1).float().cpu() for p in m.parameters()])


def hsdp(group, backend):
    return train(shard(model(), mesh_2d(backend)))


def tp_fsdp(group, backend):
    mesh = mesh_2d(backend)
    # Every Linear parallelized: clip_grad_norm_ needs all parameters on one mesh.
    m = parallelize_module(model(), mesh["inner"], {
        "0": ColwiseParallel(), "2": RowwiseParallel(),
        "4": ColwiseParallel(output_layouts=Replicate())})
    return train(shard(m, mesh["outer"]))


def one_d(group):
    used.append(group)
    return DeviceMesh.from_group(group, device)


def shard_dim1(group, backend):
    return train(shard(model(), one_d(group),
                       shard_placement_fn=lambda p: Shard(1) if p.ndim == 2 else Shard(0)))


def accumulate(group, backend):
    return train(shard(model(), one_d(group)), micro_batches=3, sync_last_only=True)


def no_reshard(group, backend):
    return train(shard(model(), one_d(group), reshard_after_forward=False))


def reshard_to_2(group, backend):
    return train(shard(model(), one_d(group), reshard_after_forward=2))


def compiled(group, backend):
    m = shard(model(), one_d(group),
              mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                             reduce_dtype=torch.float32))
    torch._dynamo.reset()
    return train(torch.compile(m, backend="aot_eager"))


def offload(group, backend):
    return train(shard(model(), one_d(group), offload_policy=CPUOffloadPolicy()))


cases = [("HSDP, 2 replicas of 2 shards", hsdp, 4), ("FSDP2 over TP", tp_fsdp, 4),
         ("parameters sharded on dim 1", shard_dim1, 2),
         ("gradient sync on the last of 3 micro-batches", accumulate, 2),
         ("reshard_after_forward=False", no_reshard, 2),
         ("resharded to 2 ranks after the forward", reshard_to_2, 4),
         ("torch.compile, bf16 params", compiled, 2)]
if device == "cuda":
    cases.append(("CPUOffloadPolicy", offload, 2))
used = []  # the groups a case shards over


def lent_through():
    """What went through buffers lent to FSDP2 by the rtd groups in used
    (and zeroes their counts)."""
    total = dict.fromkeys(("all_gather", "landed", "reduce_scatter", "not lent"), 0)
    for g in used:
        comm = getattr(g, "_comms", {}).get(device)
        if comm is not None:
            for k in total:
                total[k] += comm.slots.stats[k]
            comm.slots.stats.update(dict.fromkeys(comm.slots.stats, 0))
    used.clear()
    return total


results = []
for name, run, ranks in cases:
    if n < ranks or n % 2:
        results.append(f"{name}: left out ({n} ranks; {ranks} needed)")
        continue
    lent_through()
    ours = run(dist.group.WORLD, "rtd")
    lent = lent_through()
    theirs = run(reference, REFERENCE)
    used.clear()
    tol = dict(rtol=1e-2, atol=1e-3) if run is compiled else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours, theirs, **tol,
                               msg=lambda m: (f"rank {rank}: {name}: rtd and {REFERENCE} "
                                              f"differ: {m}"))
    start = torch.cat([p.detach().reshape(-1).cpu() for p in model().parameters()])
    if ours.numel() == start.numel() and torch.equal(ours, start):
        raise AssertionError(f"{name}: the parameters did not change")
    # With the hooks set, FSDP2's gathers and reductions go through lent
    # buffers, but where resharding after the forward gathers over another group.
    gathers = lent["all_gather"] + lent["landed"]
    if AUTO and not (gathers and lent["reduce_scatter"]):
        raise AssertionError(f"{name}: the hooks are set, yet not every kind of FSDP2's "
                             f"calls went through lent buffers: {lent}")
    if not AUTO and gathers + lent["reduce_scatter"]:
        raise AssertionError(f"{name}: the hooks are not set, yet buffers were lent: {lent}")
    diff = (ours - theirs).abs().max().item()
    results.append(f"{name}: same parameters as {REFERENCE} (largest difference {diff:.1e}; "
                   f"through lent buffers: {lent})")
dist.barrier()
if rank == 0:
    for line in results:
        print("fsdp_features: " + line, flush=True)
    print(f"fsdp_features: all agree after {steps} steps on {n} ranks ({device}), "
          f"hooks {'set by fully_shard' if AUTO else 'not set'}", flush=True)
dist.destroy_process_group()
