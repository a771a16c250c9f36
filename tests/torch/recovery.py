"""A PyTorch DDP job under dtrun --recovery=in-process (rt_dist.torch.recovery):
rank KILL_RANK of generation 0 SIGKILLs itself at step KILL_STEP, at WHERE:
  before  before the step's forward (its peers wait for it in the all-reduce)
  inside  in DDP's comm hook, its bucket's all-reduce launched
  after   after the optimizer's step (the step's collectives done)
  none    nothing is killed (the unbroken run)
Each rank prints its pid once per process, and at the end a digest of its
weights and optimizer state; rank 0 says how long the job took from the kill
to its next completed step. Device: cpu, or cuda (LOCAL_RANK's GPU).
  recovery.py WHERE KILL_RANK KILL_STEP STEPS DEVICE
RECOVERY_LAYERS=L RECOVERY_SIZE=H: L hidden layers of H^2 (default 1 of 64^2).
"""

import hashlib
import logging
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from rt_dist.torch import recovery

where, kill_rank, kill_step, steps, device = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
size = int(os.environ.get("RECOVERY_SIZE", "64"))
if device == "cuda":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    device = f"cuda:{torch.cuda.current_device()}"
stamp = os.path.join(os.environ.get("RECOVERY_DIR", "."), "killed_at")
logging.basicConfig(format="%(asctime)s %(message)s")  # rt_dist.recovery's lines, timed

torch.manual_seed(0)
hidden = [m for _ in range(int(os.environ.get("RECOVERY_LAYERS", "1")))
          for m in (torch.nn.Linear(size, size), torch.nn.GELU())]
model = torch.nn.Sequential(torch.nn.Linear(32, size), torch.nn.GELU(), *hidden,
                            torch.nn.Linear(size, 8)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
job = recovery.Job([model, optimizer])
rank, world = dist.get_rank(), dist.get_world_size()
made = time.time()
print(f"rank {rank} pid {os.getpid()} generation {job.generation} (group made at "
      f"{time.strftime('%H:%M:%S', time.localtime(made))}.{int(made * 1000) % 1000:03d})",
      flush=True)
if rank == 0 and job.generation == 0:
    print(f"{sum(p.numel() for p in model.parameters())} parameters", flush=True)


def die(at):
    if where == at and job.generation == 0 and rank == kill_rank and step == kill_step:
        with open(stamp, "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)


def hook(_state, bucket):
    # The kill can come with the bucket's collective in flight. REDUCE=sum:
    # DDP's own arithmetic (divide, then all-reduce), whose order of
    # summation depends on where an element lies in the bucket (a ring's
    # chunks), and a DDP built anew lays out its first buckets otherwise;
    # REDUCE=ordered (the default): gathered, then summed in rank order, the
    # same arithmetic for any layout.
    buf = bucket.buffer()
    if os.environ.get("REDUCE", "ordered") == "sum":
        fut = dist.all_reduce(buf.div_(world), async_op=True).get_future()
        die("inside")
        return fut.then(lambda f: f.value()[0])
    gathered = torch.empty(world, *buf.shape, dtype=buf.dtype, device=buf.device)
    fut = dist.all_gather_into_tensor(gathered, buf, async_op=True).get_future()
    die("inside")

    def total(f):
        parts = f.value()[0]
        acc = parts[0].clone()
        for r in range(1, world):
            acc += parts[r]
        return buf.copy_(acc.div_(world))
    return fut.then(total)


def build():
    ddp = DDP(model, bucket_cap_mb=1)
    ddp.register_comm_hook(None, hook)
    return ddp


def train_step(ddp, step):
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(16, 32, generator=g).to(device)
    y = torch.randn(16, 8, generator=g).to(device)
    optimizer.zero_grad(set_to_none=True)
    die("before")
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    loss.backward()
    job.check()
    optimizer.step()
    die("after")
    return loss.item()


step = job.resume(0)
if job.replacement:
    print(f"rank {rank} joined generation {job.generation}: resuming after step {step}",
          flush=True)
ddp = build()
recovered_at = None
while step < steps:
    try:
        loss = train_step(ddp, step)
        step += 1
    except Exception as e:  # noqa: BLE001 - recover() raises it again when it must
        print(f"rank {rank} caught at step {step}: {str(e).splitlines()[0][:200]}", flush=True)
        ddp = None
        step = job.recover(e, step)
        ddp = build()
        recovered_at = step
        print(f"rank {rank} recovered in generation {job.generation}: resuming after step "
              f"{step}", flush=True)
        continue
    if recovered_at is not None and step == recovered_at + 1 and rank == min({0, 1} - {kill_rank}):
        with open(stamp) as f:
            killed = float(f.read())
        print(f"from the kill to the next completed step: {time.time() - killed:.2f} s",
              flush=True)
    if step % 10 == 0 and rank == 0:
        print(f"step {step} loss {loss:.6f}", flush=True)

digest = hashlib.sha256()
for t in model.state_dict().values():
    digest.update(t.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
for s in optimizer.state.values():
    for k in sorted(s):
        digest.update(s[k].detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
print(f"rank {rank} final digest {digest.hexdigest()[:16]}", flush=True)
if rank == 0:
    torch.save({k: v.cpu() for k, v in model.state_dict().items()},
               os.path.join(os.environ.get("RECOVERY_DIR", "."), "weights.pt"))
dist.destroy_process_group()
