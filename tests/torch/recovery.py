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
RECOVERY_META=1: a worker that receives its state (recovery.receives_state())
builds the model on the meta device, then to_empty on its own.
RECOVERY_INIT_SYNC=0: DDP(init_sync=False), the Job having made the weights equal.
Each process prints how long its start took: its process's age at the
script's first line (the interpreter's start; a spare's wait), the imports,
the device, the model and optimizer, the group.
"""

import sys
import time

began = time.time()  # the script's first line (a spare's process is older: rt_dist.spare)
ahead = "torch._dynamo" in sys.modules  # a spare imported what an optimizer imports

# ruff: noqa: E402 - the imports below are timed as the start's
import hashlib
import logging
import os
import signal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from rt_dist.torch import recovery

imported = time.time()


def process_age_at(t):
    """Seconds from this process's creation (its exec: the interpreter's start) to t."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    return t - (boot + ticks / os.sysconf("SC_CLK_TCK"))

where, kill_rank, kill_step, steps, device = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
size = int(os.environ.get("RECOVERY_SIZE", "64"))
if device == "cuda":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    device = f"cuda:{torch.cuda.current_device()}"
    torch.zeros(1, device=device)  # the context made and the allocator started: "device"
placed = time.time()
stamp = os.path.join(os.environ.get("RECOVERY_DIR", "."), "killed_at")
logging.basicConfig(format="%(asctime)s %(message)s")  # rt_dist.recovery's lines, timed

torch.manual_seed(0)
meta = os.environ.get("RECOVERY_META", "0") == "1" and recovery.receives_state()
with torch.device("meta" if meta else "cpu"):
    hidden = [m for _ in range(int(os.environ.get("RECOVERY_LAYERS", "1")))
              for m in (torch.nn.Linear(size, size), torch.nn.GELU())]
    model = torch.nn.Sequential(torch.nn.Linear(32, size), torch.nn.GELU(), *hidden,
                                torch.nn.Linear(size, 8))
model = model.to_empty(device=device) if meta else model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
built = time.time()
job = recovery.Job([model, optimizer])
rank, world = dist.get_rank(), dist.get_world_size()
made = time.time()
print(f"rank {rank} pid {os.getpid()} generation {job.generation} (group made at "
      f"{time.strftime('%H:%M:%S', time.localtime(made))}.{int(made * 1000) % 1000:03d})",
      flush=True)
print(f"rank {rank} generation {job.generation} started: its process {process_age_at(began):.2f} s "
      f"old at the script's first line, then imports {imported - began:.2f} s, device "
      f"{placed - imported:.2f}, model{' (meta)' if meta else ''} {built - placed:.2f}, group "
      f"{made - built:.2f}{' (torch._dynamo imported ahead)' if ahead else ''}", flush=True)
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
    # RECOVERY_INIT_SYNC=0: DDP skips its broadcast of the weights, which the
    # Job has just made equal (resume, recover).
    ddp = DDP(model, bucket_cap_mb=1, init_sync=os.environ.get("RECOVERY_INIT_SYNC", "1") == "1")
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
resumed = time.time()
ddp = build()
if job.replacement:
    print(f"rank {rank} joined generation {job.generation}: resuming after step {step} (the "
          f"state received in {resumed - made:.2f} s, DDP built in {time.time() - resumed:.2f} s)",
          flush=True)
recovered_at = None
step_s = None  # the last step's time before the kill, on the survivors


def since_kill():
    with open(stamp) as f:
        return time.time() - float(f.read())


while step < steps:
    try:
        began_step = time.time()
        loss = train_step(ddp, step)
        step += 1
        if recovered_at is None:
            step_s = time.time() - began_step
    except Exception as e:  # noqa: BLE001 - recover() raises it again when it must
        print(f"rank {rank} caught at step {step}, {since_kill():.2f} s after the kill: "
              f"{str(e).splitlines()[0][:200]}", flush=True)
        ddp = None
        step = job.recover(e, step)
        built_at = time.time()
        ddp = build()
        recovered_at = step
        print(f"rank {rank} recovered in generation {job.generation}: resuming after step "
              f"{step} (DDP built again in {time.time() - built_at:.2f} s)", flush=True)
        continue
    if recovered_at is not None and step == recovered_at + 1 and rank == min({0, 1} - {kill_rank}):
        print(f"from the kill to the next completed step: {since_kill():.2f} s (a step before "
              f"the kill: {step_s:.2f} s, this one: {time.time() - began_step:.2f} s)",
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
