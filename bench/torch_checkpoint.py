"""torch.distributed.checkpoint's own storage (FileSystemWriter/Reader, async_save
with its stagers) against rt_dist.torch.checkpoint, on the same FSDP2 state
(model + AdamW), in the same job, alternating:
    dtrun --nproc-per-node=N python bench/torch_checkpoint.py
Environment: H (8192), L (16: 1.07 B parameters), ROUNDS (3), DIR (where the
checkpoints go; ./checkpoint_bench), BACKEND (nccl), BENCH_JSON (a file for
the figures), VARIANTS (all of: dcp dcp8 rtd).

For each variant and round, rank 0 prints:
  save_s     dcp.save, from the call to its return (both fsync their files)
  load_s     dcp.load into the model's own tensors, the files first dropped
             from the page cache (posix_fadvise DONTNEED), so read from disk
  call_s     dcp.async_save: the host blocked in the call
  held_s     async_save: until the training stream may go on (its staging
             done and the current stream free of it)
  total_s    async_save: until the checkpoint is written
dcp: FileSystemWriter's defaults and async_save's default stager; dcp8: 8
writer threads, and DefaultStager with pinned memory, async staging and
non-blocking copies (its fastest); rtd: CheckpointWriter (4 I/O threads, its
own pinned staging on a side stream); rtd-step: the same with
until_step=the optimizer (the copies of its tensors waited for by its next
step, not at once).

STEP_AFTER=1 (with BATCH rows a step, default 4, bf16 autocast): each
async_save is followed at once by a training step (forward, backward,
optimizer step; for DCP's stagers, staging_completion waited for before the
optimizer step, as DCP asks), and rank 0 prints instead of held_s:
  base_s     a training step with no save, just before
  step_s     the step right after async_save returned, to its end on the GPU
  delay_s    step_s - base_s: how long the save held training
ASYNC_ONLY=1 skips dcp.save and dcp.load.
"""

import json
import os
import shutil
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import fully_shard

from rt_dist.torch.checkpoint import CheckpointReader, CheckpointWriter

H = int(os.environ.get("H", "8192"))
L = int(os.environ.get("L", "16"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
DIR = os.path.abspath(os.environ.get("DIR", "checkpoint_bench"))
VARIANTS = os.environ.get("VARIANTS", "dcp dcp8 rtd").split()
STEP_AFTER = os.environ.get("STEP_AFTER", "0") == "1"
ASYNC_ONLY = os.environ.get("ASYNC_ONLY", "0") == "1"
BATCH = int(os.environ.get("BATCH", "4"))


def drop_cache(path):
    """Drops path's files from the page cache (clean pages: they were fsynced)."""
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def remove(variant, path):
    if not variant.startswith("rtd"):
        shutil.rmtree(path, ignore_errors=True)
        return
    for name in os.listdir(path) if os.path.isdir(path) else []:
        if name.startswith("step_"):
            shutil.rmtree(os.path.join(path, name), ignore_errors=True)


def writer(variant, path, step, opt=None):
    if variant == "rtd":  # keeps all: the older ones are removed outside the timings, as DCP's
        return CheckpointWriter(path, step=step, keep_last=0)
    if variant == "rtd-step":
        return CheckpointWriter(path, step=step, keep_last=0, until_step=opt)
    return FileSystemWriter(path, thread_count=8 if variant == "dcp8" else 1)


def reader(variant, path):
    return CheckpointReader(path) if variant.startswith("rtd") else FileSystemReader(path)


def stager(variant):
    if variant == "dcp8":
        return DefaultStager(StagingOptions(True, False, True, True))
    return None  # dcp: async_save's default; rtd: the writer stages itself


def timed(f):
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    out = f()
    torch.cuda.synchronize()
    dist.barrier()
    return time.perf_counter() - start, out


def train_step(model, opt, x, before_step=None):
    with torch.autocast("cuda", torch.bfloat16):
        loss = model(x).float().square().mean()
    loss.backward()
    if before_step is not None:
        before_step()
    opt.step()
    opt.zero_grad()


def async_save_then_step(variant, sd, path, step, model, opt, x):
    """async_save, then at once a training step: how long the save held it."""
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    train_step(model, opt, x)
    torch.cuda.synchronize()
    base = time.perf_counter() - t0
    dist.barrier()
    start = time.perf_counter()
    kwargs = {"storage_writer": writer(variant, path, step, opt)}
    if stager(variant) is not None:
        kwargs["async_stager"] = stager(variant)
    response = dcp.async_save(sd, **kwargs)
    call = time.perf_counter() - start
    staged = getattr(response, "staging_completion", None)
    t1 = time.perf_counter()
    train_step(model, opt, x, before_step=staged.result if staged is not None else None)
    torch.cuda.synchronize()
    after = time.perf_counter() - t1
    (response.upload_completion if staged is not None else response).result()
    total = time.perf_counter() - start
    return {"call_s": call, "base_s": base, "step_s": after, "delay_s": after - base,
            "total_s": total}


def async_save(variant, sd, path, step):
    dist.barrier()
    torch.cuda.synchronize()
    start = time.perf_counter()
    kwargs = {"storage_writer": writer(variant, path, step)}
    if stager(variant) is not None:
        kwargs["async_stager"] = stager(variant)
    response = dcp.async_save(sd, **kwargs)
    call = time.perf_counter() - start
    marker = torch.cuda.Event()
    marker.record()  # the training stream's next work would start here
    upload = response
    if hasattr(response, "staging_completion"):  # a stager that stages in the background
        response.staging_completion.result()
        upload = response.upload_completion
    marker.synchronize()
    held = time.perf_counter() - start
    upload.result()
    total = time.perf_counter() - start
    return call, held, total


def main():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group(f"cpu:gloo,cuda:{os.environ.get('BACKEND', 'nccl')}")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(H, H, bias=False) for _ in range(L)]).cuda()
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(BATCH, H, device="cuda")
    train_step(model, opt, x)  # the optimizer's state exists
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd}
    params = sum(p.numel() for p in model.parameters())
    state_bytes = sum(t.numel() * t.element_size()
                      for t in list(msd.values()) + [v for s in osd["state"].values()
                                                     for v in s.values()]
                      if isinstance(t, torch.Tensor))
    if rank == 0:
        usage = shutil.disk_usage(os.path.dirname(DIR))
        print(f"params {params / 1e9:.3f} B, state {state_bytes / 1e9:.2f} GB a rank, "
              f"world {dist.get_world_size()}, {DIR} on a disk of {usage.total / 1e9:.0f} GB "
              f"({usage.free / 1e9:.0f} free)", flush=True)
    results = []
    for r in range(ROUNDS):
        for variant in VARIANTS:
            path = os.path.join(DIR, variant)
            # DCP's directories are removed after each use; ours holds its lock
            # file: its steps are removed, the directory at the end.
            if rank == 0:
                remove(variant, path)
            row = {"round": r, "variant": variant}
            if not ASYNC_ONLY:
                row["save_s"], _ = timed(
                    lambda: dcp.save(sd, storage_writer=writer(variant, path, 2 * r, opt)))
                if rank == 0:
                    drop_cache(path)
                row["load_s"], _ = timed(lambda: dcp.load(sd, storage_reader=reader(variant, path)))
                if rank == 0:
                    remove(variant, path)
            dist.barrier()
            if STEP_AFTER:
                row.update(async_save_then_step(variant, sd, path, 2 * r + 1, model, opt, x))
            else:
                row["call_s"], row["held_s"], row["total_s"] = async_save(variant, sd, path,
                                                                          2 * r + 1)
            results.append(row)
            if rank == 0:
                print(" ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in row.items()), flush=True)
                remove(variant, path)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(DIR, ignore_errors=True)
    if rank == 0 and os.environ.get("BENCH_JSON"):
        with open(os.environ["BENCH_JSON"], "w") as f:
            json.dump({"params": params, "state_bytes": state_bytes, "H": H, "L": L,
                       "batch": BATCH, "step_after": STEP_AFTER,
                       "world": dist.get_world_size(), "rows": results}, f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
