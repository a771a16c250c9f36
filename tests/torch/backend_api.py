"""What a PyTorch user relies on beyond the collectives themselves, on the
C++ rtd backend, against gloo in the same processes (CPU, 2 ranks, started
here by torch.multiprocessing, not by a launcher):
- the rank and size passed to init_process_group with a store, while the
  environment has WORLD_SIZE and no RANK (as test harnesses leave it);
- no function of torch's is replaced, before or after a group is made;
- threads: two threads calling one group at once, their first calls racing
  the communicator's set-up;
- DDP's join() with uneven inputs, dividing by the initial world size and
  not, equal to gloo's;
- torch.distributed.checkpoint: save and load, and async_save;
- calls that differ in size between ranks fail on every rank, naming both.
    PYTHONPATH=build/python python tests/torch/backend_api.py
Prints "backend_api: N checks passed" and exits 0.
"""

import datetime
import os
import sys
import tempfile
import threading

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZE = 2


def replaced_functions():
    """Functions of torch's DDP, Join and FSDP2 that come from rt_dist."""
    from torch.distributed.algorithms.join import Join
    from torch.distributed.fsdp import _fully_shard
    from torch.nn.parallel import DistributedDataParallel

    found = []
    for owner in (DistributedDataParallel, Join, _fully_shard, torch.distributed,
                  torch.distributed.distributed_c10d):
        for name, value in vars(owner).items():
            fn = getattr(value, "__func__", value)
            if getattr(fn, "__module__", "") and fn.__module__.startswith("rt_dist"):
                found.append(f"{getattr(owner, '__name__', owner)}.{name}")
    return found


def train_ddp(group, rank, divide):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(6, 3), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(10 + rank)
    inputs = [torch.randn(4, 6, generator=g) for _ in range(3 + 2 * rank)]  # uneven
    with model.join(divide_by_initial_world_size=divide):
        for x in inputs:
            model(x).square().sum().backward()
            opt.step()
            opt.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def run(rank, size, store_path, ckpt_dir, out):
    checks = 0
    assert "RANK" not in os.environ and os.environ.get("WORLD_SIZE") == str(size)
    import rt_dist.torch  # noqa: F401

    before = replaced_functions()
    assert not before, f"rt_dist replaced torch's {before} at import"
    store = dist.FileStore(store_path, size)
    dist.init_process_group("rtd", rank=rank, world_size=size, store=store,
                            timeout=datetime.timedelta(seconds=20))
    assert dist.get_rank() == rank and dist.get_world_size() == size
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [float(size)] * 3, t
    assert not replaced_functions(), f"rt_dist replaced torch's {replaced_functions()}"
    checks += 3
    gloo = dist.new_group(backend="gloo")

    # Two threads at once on a fresh group: each makes 20 all-reduces of
    # ones; however the threads' calls pair up across ranks, each sums to size.
    threads_group = dist.new_group(backend="rtd")
    start = threading.Barrier(2)
    failures = []

    def hammer():
        try:
            start.wait()
            for _ in range(20):
                x = torch.ones(257)
                dist.all_reduce(x, group=threads_group)
                if not torch.equal(x, torch.full((257,), float(size))):
                    failures.append(f"a sum of {x[0].item()}")
        except Exception as e:  # noqa: BLE001  (reported below)
            failures.append(repr(e))

    workers = [threading.Thread(target=hammer) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not failures and not any(w.is_alive() for w in workers), failures
    checks += 1

    # DDP's join() with uneven inputs, both ways, against gloo.
    for divide in (True, False):
        ours = train_ddp(dist.group.WORLD, rank, divide)
        theirs = train_ddp(gloo, rank, divide)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        checks += 1

    # torch.distributed.checkpoint: state whose pickles have odd lengths.
    import torch.distributed.checkpoint as dcp

    state = {"model": {"w": torch.arange(10.0), "b": torch.ones(3, dtype=torch.bfloat16)},
             "step": 7, "name": "x" * (rank + 4)}
    dcp.save(state, checkpoint_id=os.path.join(ckpt_dir, "sync"))
    loaded = {"model": {"w": torch.zeros(10), "b": torch.zeros(3, dtype=torch.bfloat16)},
              "step": 0, "name": ""}
    dcp.load(loaded, checkpoint_id=os.path.join(ckpt_dir, "sync"))
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["step"] == 7, loaded
    # The save's collectives on a group of their own (on one group, the
    # order of two threads' calls would differ between ranks), on rtd too.
    ckpt_group = dist.new_group(backend="rtd")
    future = dcp.async_save(state, checkpoint_id=os.path.join(ckpt_dir, "async"),
                            process_group=ckpt_group)
    t = torch.ones(2)
    dist.all_reduce(t)  # training goes on beside the save's thread
    future.result()
    again = {"model": {"w": torch.zeros(10), "b": torch.zeros(3, dtype=torch.bfloat16)},
             "step": 0, "name": ""}
    dcp.load(again, checkpoint_id=os.path.join(ckpt_dir, "async"))
    assert torch.equal(again["model"]["w"], state["model"]["w"]), again
    checks += 2

    # Sizes that differ between ranks: an error on every rank, naming both calls.
    short = dist.new_group(backend="rtd", timeout=datetime.timedelta(seconds=4))
    try:
        dist.all_reduce(torch.ones(4 + 4 * rank), group=short)
        raise AssertionError("an all_reduce of different sizes succeeded")
    except dist.DistBackendError as e:
        other = "x 8" if rank == 0 else "x 4"
        assert f"all_reduce (float32 {other}" in str(e), e
        checks += 1
    with open(out + f".{rank}", "w") as f:
        f.write(str(checks))
    dist.destroy_process_group()


def main():
    os.environ.pop("RANK", None)
    os.environ["WORLD_SIZE"] = str(SIZE)  # a harness's leftover, as the issue found
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "checks")
        mp.spawn(run, args=(SIZE, os.path.join(tmp, "store"), tmp, out), nprocs=SIZE)
        counts = [int(open(out + f".{r}").read()) for r in range(SIZE)]
    print(f"backend_api: {counts[0]} checks passed on {SIZE} ranks", flush=True)
    return 0 if len(set(counts)) == 1 and counts[0] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
