"""torch.distributed.checkpoint into librt_dist's format (rt_dist.torch.checkpoint),
under dtrun on CPU:
    dtrun --nproc-per-node=N python tests/torch/dcp_checkpoint.py BACKEND DIR RTD_CKPT save [cuda]
    dtrun --nproc-per-node=M python tests/torch/dcp_checkpoint.py BACKEND DIR RTD_CKPT load [cuda]
(cuda: the model on the rank's GPU, the group BACKEND for cuda and gloo for the
host, as dcp.async_save needs)

save (N ranks): an FSDP2 model with AdamW state, a bool and an int64 buffer, a
replicated DDP-style tensor and plain objects, saved by dcp.save through
CheckpointWriter; `rtd-ckpt verify` accepts it; loaded into a fresh model and
optimizer, which then train on exactly as the originals; a later step whose
piece is corrupted is named and the one before loaded; a rank that cannot
prepare its part fails every rank at once; dcp.async_save through the writer;
a second async save reusing the staged copies; an async save held until
the optimizer's next step (until_step), training at once after it; keep_last; a second
keep_last for the directory, an empty directory and a negative step refused;
the full state written for the load job.
load (M ranks, another job): the newest checkpoint into M shards equals the
full state the save job wrote.
"""

import glob
import os
import shutil
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import fully_shard

import rt_dist.torch  # noqa: F401
from rt_dist.torch.checkpoint import CheckpointReader, CheckpointWriter

BACKEND, DIR, RTD_CKPT, PHASE = sys.argv[1:5]
DEVICE = sys.argv[5] if len(sys.argv) > 5 else "cpu"
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"rank {dist.get_rank()}: FAILED: {what}", flush=True)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(12, 30)  # 30 rows: uneven shards on 4 ranks
        self.b = nn.Linear(30, 5)
        self.register_buffer("mask", torch.tensor([True, False, True]))
        self.register_buffer("count", torch.tensor([3, 1, 4], dtype=torch.int64))

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def make(seed):
    torch.manual_seed(seed)
    model = Net().to(DEVICE)
    fully_shard(model.a)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    return model, opt


def train(model, opt, steps, seed=7):
    g = torch.Generator().manual_seed(seed + dist.get_rank())
    for _ in range(steps):
        x = torch.randn(8, 12, generator=g).to(DEVICE)
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()


def state(model, opt, extra):
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd, "extra": extra,
            "ddp": torch.arange(6, dtype=torch.float32).reshape(2, 3) * (extra["step"] + 1)}


def full(model, opt):
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    return msd, osd


def same(a, b, what):
    if isinstance(a, dict):
        check(isinstance(b, dict) and a.keys() == b.keys(), f"{what}: keys differ")
        for k in a:
            if isinstance(b, dict) and k in b:
                same(a[k], b[k], f"{what}.{k}")
    elif isinstance(a, (list, tuple)):
        check(len(a) == len(b), f"{what}: lengths differ")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{what}[{i}]")
    elif isinstance(a, torch.Tensor):
        a = (a.full_tensor() if hasattr(a, "full_tensor") else a).cpu()
        b = (b.full_tensor() if hasattr(b, "full_tensor") else b).cpu()
        check(a.dtype == b.dtype and torch.equal(a, b), f"{what}: tensors differ")
    else:
        check(a == b, f"{what}: {a!r} != {b!r}")


def same_values(a, b):
    """Whether two full model states hold equal tensors (no check recorded)."""
    a_t = [t for t in torch.utils._pytree.tree_leaves(a) if isinstance(t, torch.Tensor)]
    b_t = [t for t in torch.utils._pytree.tree_leaves(b) if isinstance(t, torch.Tensor)]
    return len(a_t) == len(b_t) and all(torch.equal(x.cpu(), y.cpu()) for x, y in zip(a_t, b_t))


def fresh_state(seed, step):
    model, opt = make(seed)
    train(model, opt, 1, seed=99)  # optimizer state exists, with other values
    return model, opt, state(model, opt, {"step": -1, "note": ""})


def load_into(model, opt, sd, reader):
    dcp.load(sd, storage_reader=reader)
    set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])


def load_fresh(seed, expect_step, what):
    """A fresh model and optimizer (other values) loaded from DIR's newest
    checkpoint, which must be expect_step."""
    model, opt, sd = fresh_state(seed, expect_step)
    reader = CheckpointReader(DIR)
    load_into(model, opt, sd, reader)
    check(reader.step == expect_step, f"{what}: loaded step {reader.step}, not {expect_step}")
    return model, opt, sd


def check_runs():
    """DCP chunks as element ranges: against indexing, for chunks cut along
    any dimension (tensor parallelism cuts the second)."""
    from rt_dist.torch._checkpoint_slots import runs

    cases = [((4, 5, 6), (1, 2, 0), (2, 3, 6)), ((4, 5, 6), (0, 0, 0), (4, 5, 6)),
             ((4, 5, 6), (3, 0, 0), (1, 5, 6)), ((4, 5, 6), (0, 1, 2), (4, 2, 3)),
             ((7,), (2,), (5,)), ((), (), ()), ((3, 0), (0, 0), (3, 0))]
    for shape, offsets, sizes in cases:
        t = torch.arange(torch.Size(shape).numel()).reshape(shape)
        chunk = t[tuple(slice(o, o + n) for o, n in zip(offsets, sizes))].flatten()
        flat = t.flatten()
        got = [flat[first:first + count] for first, count in runs(offsets, sizes, shape)]
        got = torch.cat(got) if got else torch.empty(0, dtype=t.dtype)
        check(torch.equal(got, chunk), f"runs{(shape, offsets, sizes)}: {got} != {chunk}")


def save_phase():
    rank = dist.get_rank()
    if rank == 0:
        shutil.rmtree(DIR, ignore_errors=True)
        check_runs()
    dist.barrier()
    model, opt = make(1)
    train(model, opt, 3)
    sd = state(model, opt, {"step": 5, "note": "after three steps"})
    dcp.save(sd, storage_writer=CheckpointWriter(DIR, step=5, keep_last=2))
    if rank == 0:
        verify = subprocess.run([RTD_CKPT, "verify", DIR], capture_output=True, text=True)
        check(verify.returncode == 0, f"rtd-ckpt verify: {verify.stdout}{verify.stderr}")
        check(os.path.exists(os.path.join(DIR, "step_00000005", "manifest.json")),
              "step_00000005/manifest.json missing")
    dist.barrier()

    # A fresh model and optimizer load it, and both go on alike.
    model2, opt2, sd2 = load_fresh(2, 5, "the first load")
    same(sd2["extra"], {"step": 5, "note": "after three steps"}, "extra")
    same(sd2["ddp"], sd["ddp"], "ddp")
    same(full(model2, opt2), full(model, opt), "loaded state")
    train(model, opt, 2)
    train(model2, opt2, 2)
    same(full(model2, opt2), full(model, opt), "state two steps after the load")

    # A rank that cannot prepare its part (the last) fails every rank, at once.
    last = dist.get_world_size() - 1

    class FailsOnTheLastRank(CheckpointWriter):
        @staticmethod
        def _prepare(item, planner, tensors, meta):
            if dist.get_rank() == last:
                raise ValueError("this rank's part cannot be read")
            return CheckpointWriter._prepare(item, planner, tensors, meta)

    started = time.monotonic()
    try:
        dcp.save(state(model, opt, {"step": 6, "note": ""}),
                 storage_writer=FailsOnTheLastRank(DIR, step=6, keep_last=2))
        check(False, "a save with a failing rank returned")
    except CheckpointException as e:
        check(f"rank {last}:" in str(e) and "cannot be read" in str(e),
              f"the failing rank is not named: {e}")
    check(time.monotonic() - started < 60, "the failed save took a minute or more")
    check(not os.path.exists(os.path.join(DIR, "step_00000006")), "the failed save left step 6")

    # Step 6 saved, then a piece of it corrupted: the load names it and takes step 5.
    sd6 = state(model, opt, {"step": 6, "note": "six"})
    dcp.save(sd6, storage_writer=CheckpointWriter(DIR, step=6, keep_last=2))
    dist.barrier()
    if rank == 0:
        victim = sorted(glob.glob(os.path.join(DIR, "step_00000006", "rank_*.bin")))[-1]
        with open(victim, "r+b") as f:
            f.seek(10)
            byte = f.read(1)
            f.seek(10)
            f.write(bytes([byte[0] ^ 0xFF]))
    dist.barrier()
    _, _, sd3 = load_fresh(3, 5, "after the corruption")
    same(sd3["extra"], {"step": 5, "note": "after three steps"}, "extra after the fallback")
    try:
        dcp.load(fresh_state(4, 6)[2], storage_reader=CheckpointReader(DIR, step=6))
        check(False, "step 6 (corrupted) loaded when asked for by name")
    except CheckpointException as e:
        check("CRC" in str(e) or "crc" in str(e), f"the corruption is not named: {e}")

    # async_save through the writer's own staging; keep_last=2 leaves 6 and 7.
    sd7 = state(model, opt, {"step": 7, "note": "async"})
    future = dcp.async_save(sd7, storage_writer=CheckpointWriter(DIR, step=7, keep_last=2))
    future.result()
    steps = sorted(os.path.basename(p) for p in glob.glob(os.path.join(DIR, "step_*")))
    check(steps == ["step_00000006", "step_00000007"], f"kept {steps}")
    model4, opt4, _ = load_fresh(4, 7, "after the async save")
    same(full(model4, opt4), full(model, opt), "state after the async save")

    # A second async_save after training on: the staged copies are reused, and
    # hold the new values.
    train(model, opt, 1)
    sd8 = state(model, opt, {"step": 8, "note": "async again"})
    dcp.async_save(sd8, storage_writer=CheckpointWriter(DIR, step=8, keep_last=2)).result()
    model5, opt5, _ = load_fresh(6, 8, "after the second async save")
    same(full(model5, opt5), full(model, opt), "state after the second async save")

    # What a user gets wrong is named.
    try:
        dcp.save(sd8, storage_writer=CheckpointWriter(DIR, step=9, keep_last=5))
        check(False, "a second keep_last for the same directory was taken")
    except CheckpointException as e:
        check("keep_last" in str(e), f"the setting is not named: {e}")
    empty = os.path.join(DIR, "empty")
    try:
        dcp.load(sd8, storage_reader=CheckpointReader(empty))
        check(False, "a load from an empty directory returned")
    except CheckpointException as e:
        check("none is committed" in str(e), f"the empty directory is not said: {e}")
    try:
        CheckpointWriter(DIR, step=-1)
        check(False, "step -1 was taken")
    except ValueError:
        pass

    try:
        CheckpointWriter(DIR, until_step="opt")
        check(False, "until_step took something else than an optimizer")
    except ValueError:
        pass

    # until_step: the copies of the optimizer's tensors are waited for by its
    # next step, not at once. A step right after the call changes the
    # parameters and the state; the checkpoint holds those of the call.
    train(model, opt, 1)
    msd, osd = torch.utils._pytree.tree_map(  # copies: AdamW's steps are the live tensors
        lambda t: t.clone() if isinstance(t, torch.Tensor) else t, full(model, opt))
    sd9 = state(model, opt, {"step": 9, "note": "until the step"})
    # Training goes on while the save runs its collectives: on a group of its own.
    ckpt_group = dist.new_group(backend="gloo")
    future = dcp.async_save(sd9, storage_writer=CheckpointWriter(DIR, step=9, keep_last=2,
                                                                 until_step=opt),
                            process_group=ckpt_group)
    train(model, opt, 2)  # its first step waits for the copies
    future.result()
    model7, opt7, _ = load_fresh(7, 9, "after the save held until the step")
    same(full(model7, opt7), (msd, osd), "state saved before the step")
    check(not same_values(full(model, opt), (msd, osd)), "training after the save changed nothing")
    if rank == 0:
        torch.save({"model": msd, "optim": osd, "ddp": sd9["ddp"]}, os.path.join(DIR, "full.pt"))


def load_phase():
    expected = torch.load(os.path.join(DIR, "full.pt"), weights_only=False)
    model, opt, sd = load_fresh(5, 9, f"on {dist.get_world_size()} ranks")
    msd, osd = full(model, opt)
    same(msd, expected["model"], f"model on {dist.get_world_size()} ranks")
    same(osd, expected["optim"], f"optimizer on {dist.get_world_size()} ranks")
    same(sd["ddp"], expected["ddp"], "ddp")
    same(sd["extra"], {"step": 9, "note": "until the step"}, "extra")


def failures_of_all_ranks():
    """The failures every rank found, summed through the store, not by a
    collective: a gloo collective just before the exit can abort it (torch
    2.11's gloo thread frees the call's Work, and with it a tensor's Python
    object, while the interpreter finalizes: std::terminate, seen in one run
    of five here). Every rank waits for every rank's count."""
    store = dist.distributed_c10d._get_default_store()
    store.add("test/failures", len(failures))
    store.add("test/reported", 1)
    deadline = time.monotonic() + 120
    while store.add("test/reported", 0) < dist.get_world_size():
        if time.monotonic() > deadline:
            raise TimeoutError("not every rank reported its failures within 120 s")
        time.sleep(0.01)
    return store.add("test/failures", 0)


def main():
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(f"cpu:gloo,cuda:{BACKEND}")
    else:
        dist.init_process_group(BACKEND)
    (save_phase if PHASE == "save" else load_phase)()
    failed = failures_of_all_ranks()
    dist.destroy_process_group()
    if failed:
        sys.exit(1)
    print(f"dcp_checkpoint {PHASE}: ok", flush=True)


if __name__ == "__main__":
    main()
