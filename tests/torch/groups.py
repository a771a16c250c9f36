"""Groups made from groups on the rtd backend: torch.distributed.split_group
and shrink_group, as a PyTorch user calls them, checked by their results.
N ranks (N >= 2, under dtrun): the default group is split into the first
N-1 ranks and the last one alone; the first part split again into single
ranks; then the last rank leaves (it exits) and the others shrink the
default group without it, and the shrunken group becomes the default.
    dtrun --nproc-per-node=N python tests/torch/groups.py [cpu|cuda]
Prints "groups: N checks passed" on every remaining rank and exits 0.
On CPU torch's split_group asks for a default group bound to a device, which
init_process_group binds only to accelerators: the test binds it to CPU 0
itself (bound_device_id), as a CPU script would.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import rt_dist.torch  # noqa: F401 - registers "rtd" (under torchrun too)

checks = 0


def expect(cond, what):
    global checks
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")
    checks += 1


def total(group, n_values, device):
    """All-reduce of each group rank's (global rank + 1): the sum over the group."""
    t = torch.full((n_values,), float(dist.get_rank() + 1), device=device)
    dist.all_reduce(t, group=group)
    return t


def main(device_type):
    local = int(os.environ["LOCAL_RANK"])
    if device_type == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("rtd", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("rtd")
        dist.group.WORLD.bound_device_id = torch.device("cpu", 0)
    rank, n = dist.get_rank(), dist.get_world_size()
    first, last = list(range(n - 1)), [n - 1]

    # A split: the first n-1 ranks and the last alone, with its own timeout.
    part = dist.split_group(split_ranks=[first, last], timeout=datetime.timedelta(seconds=60))
    expect(part is not None, "split_group gave this rank no group")
    backend = dist.get_backend(part)
    expect(backend == "rtd", f"the split group's backend is {backend}")
    mine = first if rank in first else last
    expect(dist.get_world_size(part) == len(mine), "the split group's size")
    expect(dist.get_rank(part) == mine.index(rank), "this rank's rank in the split group")
    want = sum(r + 1 for r in mine)
    got = total(part, 5, device)
    expect(torch.equal(got, torch.full_like(got, float(want))), f"split all_reduce {got} != {want}")
    # Odd sizes and a broadcast from the group's last rank, through its own communicators.
    b = torch.arange(7, device=device, dtype=torch.float64) * (rank + 1)
    dist.broadcast(b, group_src=len(mine) - 1, group=part)
    expect(torch.equal(b, torch.arange(7, device=device, dtype=torch.float64) * (mine[-1] + 1)),
           "broadcast in the split group")
    # The parent still works beside it.
    got = total(None, 3, device)
    want = n * (n + 1) // 2
    expect(torch.equal(got, torch.full_like(got, float(want))), "the parent's all_reduce")

    # A split of the split: the first part into single ranks; the last rank
    # is in no group of this one (it gets None).
    if rank in first:
        alone = dist.split_group(parent_pg=part, split_ranks=[[r] for r in range(len(first))])
        expect(alone is not None and dist.get_world_size(alone) == 1, "a split of one rank")
        got = total(alone, 2, device)
        expect(torch.equal(got, torch.full_like(got, float(rank + 1))),
               "a group of one's all_reduce")

    # The last rank leaves; the others shrink the default group without it.
    dist.barrier()
    if rank == n - 1:
        dist.destroy_process_group()
        print(f"groups: {checks} checks passed (rank {rank}, left before the shrink)", flush=True)
        return
    shrunk = dist.shrink_group([n - 1])
    expect(dist.get_world_size(shrunk) == n - 1, "the shrunken group's size")
    expect(dist.get_world_size() == n - 1, "the shrunken group is the default")
    want = sum(r + 1 for r in first)
    got = total(shrunk, 4, device)
    expect(torch.equal(got, torch.full_like(got, float(want))), f"shrunken all_reduce {got}")
    got = total(None, 4, device)
    expect(torch.equal(got, torch.full_like(got, float(want))), "the new default's all_reduce")
    dist.destroy_process_group()
    print(f"groups: {checks} checks passed (rank {rank})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
