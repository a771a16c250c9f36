"""DeviceMesh and DTensor on the rtd backend (under dtrun, 4 CPU ranks):
init_device_mesh's sub-groups are rtd groups and reduce over their ranks,
and a DTensor's redistribution (functional collectives) is exact.
Prints "mesh: ok" on rank 0."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
try:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
except ImportError:  # torch < 2.5: DTensor under its first name
    from torch.distributed._tensor import Replicate, Shard, distribute_tensor

import rt_dist.torch  # noqa: F401
from rtd_impl import backend

dist.init_process_group("rtd")
rank, n = dist.get_rank(), dist.get_world_size()
assert n == 4, "run with 4 ranks"
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
for dim in ("dp", "tp"):
    g = mesh[dim].get_group()
    if type(backend(g)).__name__ != "ProcessGroupRTD":
        raise AssertionError(f"the {dim} group's backend is a {type(backend(g)).__name__}")
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=g)
    members = dist.get_process_group_ranks(g)
    if t.item() != float(sum(members)):
        raise AssertionError(f"rank {rank}: {dim} sum {t.item()} over {members}")
flat = init_device_mesh("cpu", (n,))
x = torch.arange(16.0).reshape(8, 2)
d = distribute_tensor(x, flat, [Shard(0)])
if not torch.equal(d.to_local(), x[2 * rank:2 * rank + 2]):
    raise AssertionError(f"rank {rank}: wrong shard")
if not torch.equal(d.redistribute(flat, [Replicate()]).to_local(), x):
    raise AssertionError(f"rank {rank}: all-gather of the shards is not the tensor")
dist.barrier()
if rank == 0:
    print("mesh: ok", flush=True)
dist.destroy_process_group()
