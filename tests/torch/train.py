"""PyTorch's own DDP and FSDP2 trained on the rtd backend and on gloo (or
nccl) in one process, from the same start on the same data: the parameters
must agree at the end (run under dtrun, 2 or more ranks):
    dtrun --nproc-per-node=N python tests/torch/train.py [cpu|cuda] [steps]
DDP: no_sync() gradient accumulation and a comm hook (bf16 compression), and
rt_dist's own hook (rt_dist.torch.ddp_hook: each bucket set up once; on the
reference group it is PyTorch's allreduce_hook);
FSDP2: fully_shard per layer, with a MixedPrecisionPolicy, and with
rt_dist.torch.fsdp_comms (gathers and reductions in buffers the peers mapped
once; on the reference group it leaves FSDP2's defaults).
RTD_TRAIN_H (default 64): the layers' width; at 1024 FSDP2's gathers and
reductions move 1 MiB or more, so that on GPUs they go by copy engines.
RTD_TORCH_FSDP_COMMS (default 1): fully_shard itself sets fsdp_comms's hooks
(checked: on every FSDP2 run with 1, on none but the explicit calls with 0).
"""

import os
import sys

import torch
import rt_dist.torch  # noqa: F401  (under dtrun `import torch` has loaded it already)
from rtd_impl import IMPL, calls
import small_mlp  # tests/torch/small_mlp.py

# Not even RTD_TORCH_FSDP_COMMS=1 (the default) makes the backend import FSDP2 (most of a
# second): fully_shard is patched at FSDP2's first import, below.
assert "torch.distributed.fsdp" not in sys.modules, "rt_dist.torch imported FSDP2"
# The imports below come after that check on purpose (E402).
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh  # noqa: E402

try:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:  # torch < 2.6: FSDP2 under its first name
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
if device == "cuda":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    # Same arithmetic on both backends: no TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
dist.init_process_group("rtd")
rank, n = dist.get_rank(), dist.get_world_size()
reference = dist.new_group(backend="nccl" if device == "cuda" else "gloo")
H = int(os.environ.get("RTD_TRAIN_H", "64"))
AUTO_COMMS = IMPL == "python" and rt_dist._config.switch("RTD_TORCH_FSDP_COMMS")
# fsdp_comms' gathers land in the parameters themselves where this is 1.
LAND = rt_dist._config.switch("RTD_TORCH_FSDP_LAND")
PARK = rt_dist._config.switch("RTD_TORCH_FSDP_PARK")


def model():
    return small_mlp.model(H, device)


def batch(step, micro=0):
    return small_mlp.batch(step, micro, rank, H, device)


def train_ddp(group, hook=None):
    m = DDP(model(), process_group=group, bucket_cap_mb=0.01, gradient_as_bucket_view=True)
    if hook is not None:
        m.register_comm_hook(group, hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for step in range(steps):
        with m.no_sync():  # accumulate the first micro-batch locally
            x, y = batch(step, 0)
            nn.functional.mse_loss(m(x), y).backward()
        x, y = batch(step, 1)
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return torch.cat([p.detach().reshape(-1) for p in m.module.parameters()])


def held_after(phase, group):
    """Landed parameters' memory goes by the end of the forward (not through
    the loss) and of the backward (not through the optimizer step); on
    GPUs, as host memory goes at once. So do the buffers lent to FSDP2
    (parked), unless RTD_TORCH_FSDP_PARK=0."""
    queued = len(rt_dist.torch._fsdp_comms._landing.queued)
    if queued:
        raise AssertionError(f"{queued} landed parameters still held after the {phase}")
    comm = getattr(group, "_comms", {}).get(device)
    if PARK and comm is not None:
        held = {k: v for k, v in comm.slots.held().items() if v[2]}
        if held:
            raise AssertionError(f"buffers lent to FSDP2 still held after the {phase}: "
                                 f"{held} (buffers, sizes, bytes)")


def train_fsdp(group, mixed, comms=False):
    m = model()
    mesh = DeviceMesh.from_group(group, device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if mixed else MixedPrecisionPolicy()
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(m, mesh=mesh, mp_policy=policy)
    if comms:
        installed = rt_dist.torch.fsdp_comms(m)
        expected = 3 if isinstance(group, rt_dist.torch.ProcessGroupRTD) else 0  # the Linears
        if installed != expected:
            raise AssertionError(f"fsdp_comms set {installed} modules, not {expected}")
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for step in range(steps):
        if comms and step == steps // 2 and isinstance(group, rt_dist.torch.ProcessGroupRTD):
            group.release_shard_buffers()  # mid-training: the next calls set up afresh
        x, y = batch(step)
        out = m(x)
        held_after("forward", group)
        nn.functional.mse_loss(out.float(), y).backward()
        held_after("backward", group)
        if comms and device == "cuda" and step == steps // 2 + 1:
            # The parked buffers' memory may go back to the driver: the next
            # lends get new memory, perhaps where the old was, and must set up
            # afresh (a set-up kept on freed memory would give wrong results).
            torch.cuda.empty_cache()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return torch.cat([p.full_tensor().detach().reshape(-1) for p in m.parameters()])


results = []
# Tolerances: fp32 reductions may add in another order (1e-5); bf16 ones
# (the compression hook) round each partial sum, so the order shows at bf16's
# precision (a few 1e-3 of a gradient; after 20 steps about 1e-4 of a weight).
for name, run, rtol, atol in (
        ("DDP", lambda g: train_ddp(g), 1e-5, 1e-6),
        ("DDP with no_sync and a bf16 comm hook",
         lambda g: train_ddp(g, default_hooks.bf16_compress_hook), 1e-2, 5e-4),
        ("DDP with rt_dist's bucket hook", lambda g: train_ddp(g, rt_dist.torch.ddp_hook),
         1e-5, 1e-6),
        ("FSDP2", lambda g: train_fsdp(g, False), 1e-5, 1e-6),
        ("FSDP2 bf16 params, fp32 reduce", lambda g: train_fsdp(g, True), 1e-5, 1e-6),
        ("FSDP2 with rt_dist's comms", lambda g: train_fsdp(g, False, True), 1e-5, 1e-6),
        ("FSDP2 bf16 params, fp32 reduce, rt_dist's comms", lambda g: train_fsdp(g, True, True),
         1e-5, 1e-6)):
    if IMPL != "python" and ("hook" in name or "comms" in name):
        continue  # rt_dist's hooks belong to the Python backend (docs/torch.md)
    before = calls(device=device)
    ours = run(dist.group.WORLD)
    if calls(device=device) == before:
        raise AssertionError(f"{name}: no collective went through rtd")
    how = ""
    if "bucket hook" in name:
        buckets = dist.group.WORLD._comms[device].buckets
        if not buckets:
            raise AssertionError(f"{name}: no bucket was set up")
        how = f", {len(buckets)} buckets by {sorted({b.method for b in buckets.values()})}"
    # With RTD_TORCH_FSDP_COMMS=1, fully_shard set the hooks on every FSDP2 run;
    # with 0, on none.
    lent = "comms" in name or (AUTO_COMMS and name.startswith("FSDP2"))
    if name.startswith("FSDP2") and not lent and IMPL == "python":
        stats = dist.group.WORLD._comms[device].slots.stats
        if stats["all_gather"] + stats["landed"] + stats["reduce_scatter"]:
            raise AssertionError(f"{name}: RTD_TORCH_FSDP_COMMS=0, yet FSDP2's calls went "
                                 f"through lent buffers: {stats}")
    if lent and (device == "cpu" or H >= 1024):  # on GPUs, 1 MiB and more
        slots = dist.group.WORLD._comms[device].slots
        stats = dict(slots.stats)
        gathers = stats["all_gather"] + stats["landed"]
        if not gathers or not stats["reduce_scatter"] or stats["not lent"]:
            raise AssertionError(f"{name}: FSDP2's calls did not all go through lent "
                                 f"buffers: {stats}")
        # Every unit here is plain shards on dim 0: each gather lands in the
        # parameters, or none does (RTD_TORCH_FSDP_LAND=0).
        if stats["landed"] != (gathers if LAND else 0):
            raise AssertionError(f"{name}: {stats['landed']} of {gathers} all-gathers landed "
                                 f"in the parameters (RTD_TORCH_FSDP_LAND={int(LAND)}): {stats}")
        # Parked at the end of each forward and backward (held_after checks
        # none is held then); "moved": came back elsewhere on some rank.
        if bool(stats["parked"]) != PARK:
            raise AssertionError(f"{name}: {stats['parked']} buffers parked "
                                 f"(RTD_TORCH_FSDP_PARK={int(PARK)}): {stats}")
        # One all-gather buffer a size: FSDP2's forward lets the next gather
        # have the one it keeps once its copy-out is done.
        buffers, sizes, _ = slots.held()["all_gather"]
        if buffers != sizes:
            raise AssertionError(f"{name}: {buffers} all-gather buffers for {sizes} sizes")
        how = f", {gathers} all-gathers ({stats['landed']} landed in the parameters) and " \
              f"{stats['reduce_scatter']} reduce-scatters in lent buffers by " \
              f"{sorted(slots.methods)}, {buffers} all-gather buffers for {sizes} sizes, " \
              f"parked {stats['parked']} times, {stats['moved']} of them set up again"
        for k in ("all_gather", "reduce_scatter", "landed", "parked", "moved"):
            slots.stats[k] = 0
    theirs = run(reference)
    start = model()
    moved = sum((p.detach().reshape(-1) - q).abs().sum().item() for p, q in zip(
        start.parameters(), torch.split(ours, [p.numel() for p in start.parameters()])))
    if moved == 0:
        raise AssertionError(f"{name}: the parameters did not change")
    torch.testing.assert_close(ours, theirs, rtol=rtol, atol=atol,
                               msg=lambda m: f"rank {rank}: {name}: rtd and reference differ: {m}")
    diff = (ours - theirs).abs().max().item()
    results.append(f"{name}: same parameters as the reference ({ours.numel()} values, "
                   f"largest difference {diff:.1e}{how})")
# A model without FSDP modules gets nothing set; a torch without FSDP2's
# custom collectives gets the reason and what to do.
assert rt_dist.torch.fsdp_comms(model()) == 0
_comms = sys.modules["rt_dist.torch._fsdp_comms"]
_saved, _comms.AllGather = _comms.AllGather, None
try:
    rt_dist.torch.fsdp_comms(model())
    raise AssertionError("fsdp_comms without FSDP2's custom collectives was not refused")
except RuntimeError as e:
    assert "leave the call out" in str(e), e
finally:
    _comms.AllGather = _saved
dist.barrier()
if rank == 0:
    for line in results:
        print("train: " + line, flush=True)
    print(f"train: all agree after {steps} steps on {n} ranks ({device})", flush=True)
dist.destroy_process_group()
