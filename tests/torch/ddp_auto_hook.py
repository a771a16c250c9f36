"""An unchanged DDP script on rtd gets rt_dist.torch.ddp_hook by itself
(RTD_TORCH_DDP_HOOK=1, the default), and only where it may; DDP's join()
with uneven inputs works with it, dividing as DDP does. The parameters
after 8 steps must equal the same script's on gloo (or nccl) in every case
(run under dtrun, 2 or more ranks):
    dtrun --nproc-per-node=N python tests/torch/ddp_auto_hook.py [cpu|cuda] [0|1]
The last argument is what RTD_TORCH_DDP_HOOK is set to (the test checks
that the hook was, or was not, registered).
"""

import faulthandler
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import rt_dist.torch
from rt_dist.torch._ddp_hook import auto_ddp_hook

# A hang (DDP waiting for ever) fails with every thread's stack, before
# run.sh's limit (RTD_TEST_HANG_S: sooner).
faulthandler.dump_traceback_later(int(os.environ.get("RTD_TEST_HANG_S", "240")), exit=True)
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
auto = (sys.argv[2] if len(sys.argv) > 2 else "1") == "1"
assert os.environ.get("RTD_TORCH_DDP_HOOK", "1") == ("1" if auto else "0"), \
    "run with RTD_TORCH_DDP_HOOK as the second argument says"
if device == "cuda":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.backends.cuda.matmul.allow_tf32 = False
dist.init_process_group("rtd")
rank, n = dist.get_rank(), dist.get_world_size()
reference = dist.new_group(backend="nccl" if device == "cuda" else "gloo")
STEPS = 8


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)


def batch(step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 32, generator=g).to(device), torch.randn(8, 4, generator=g).to(device)


def step(m, opt, i):
    x, y = batch(i)
    nn.functional.mse_loss(m(x), y).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def plain(m, opt):
    for i in range(STEPS):
        step(m, opt, i)


def user_hook(m, opt):
    m.register_comm_hook(m.process_group, default_hooks.allreduce_hook)
    plain(m, opt)


def evaluated_first(m, opt):
    """An evaluation forward (no gradients) before the script registers its hook."""
    with torch.no_grad():
        m(batch(0)[0])
    user_hook(m, opt)


def builtin_hook(m, opt):
    m._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
    plain(m, opt)


def uneven(m, opt, first_outside=False, divide=True):
    """Rank 0 trains on one batch more than the others, under join()."""
    start = 0
    if first_outside:  # the hook registered outside join(), which comes later
        step(m, opt, 0)
        start = 1
    with m.join(divide_by_initial_world_size=divide):
        for i in range(start, STEPS + (1 if rank == 0 else 0)):
            step(m, opt, i)


class WithUnused(nn.Module):
    """A model with a layer its forward never uses."""

    def __init__(self):
        super().__init__()
        self.used = model()
        self.unused = nn.Linear(4, 4).to(device)

    def forward(self, x):
        return self.used(x)


def refused(call, says, what):
    """call() must raise RuntimeError saying `says`; what: the failure otherwise."""
    try:
        call()
    except RuntimeError as e:
        if says not in str(e):
            raise
        return
    raise AssertionError(f"rank {rank}: {what}")


def run(group, train, **options):
    net = WithUnused() if options.get("find_unused_parameters") else model()
    m = DDP(net, process_group=group, bucket_cap_mb=0.001, gradient_as_bucket_view=True,
            **options)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    train(m, opt)
    return m, torch.cat([p.detach().reshape(-1) for p in m.module.parameters()])


world = dist.group.WORLD
comms = world._comms  # per device, set up at the first collective
results = []
# join(divide_by_initial_world_size=False) divides by the ranks still
# training: without a hook DDP's C++ reducer would read that from the Work of
# a Python process group, which it cannot (it would wait for ever): refused
# on every rank with what to do; rtd's own hook divides as DDP would.
REFUSED = "divide_by_initial_world_size=True"
for name, train, expect, *options in (
        ("plain DDP", plain, "auto"),
        ("DDP with static_graph=True", plain, "auto", {"static_graph": True}),
        ("DDP with find_unused_parameters=True and a layer unused", plain, "auto",
         {"find_unused_parameters": True}),
        ("DDP with a Python comm hook of its own", user_hook, "user"),
        ("DDP evaluated before its own hook is registered", evaluated_first, "user"),
        ("DDP with a built-in comm hook", builtin_hook, "none"),
        ("DDP under join()", lambda m, o: uneven(m, o), "auto"),
        ("DDP under join() entered after the first step", lambda m, o: uneven(m, o, True), "auto"),
        ("DDP under join(divide_by_initial_world_size=False)",
         lambda m, o: uneven(m, o, divide=False), "auto" if auto else "refused"),
        ("DDP under join(divide_by_initial_world_size=False) entered after the first step",
         lambda m, o: uneven(m, o, True, False), "auto" if auto else "refused"),
        ("DDP with rt_dist's hook registered by the script, under join()",
         lambda m, o: (m.register_comm_hook(m.process_group, rt_dist.torch.ddp_hook),
                       uneven(m, o, True)), "ours"),
        ("DDP with rt_dist's hook registered by the script, under "
         "join(divide_by_initial_world_size=False)",
         lambda m, o: (m.register_comm_hook(m.process_group, rt_dist.torch.ddp_hook),
                       uneven(m, o, True, False)), "ours"),
        # State None: the default group (rtd), also for the reference's model,
        # whose own group is not rtd (a joined rank's zeros once hung it on GPUs).
        ("DDP with rt_dist's hook on the default group, under join()",
         lambda m, o: (m.register_comm_hook(None, rt_dist.torch.ddp_hook), uneven(m, o, True)),
         "ours_default"),
        ("DDP with its own hook under join(divide_by_initial_world_size=False)",
         lambda m, o: (m.register_comm_hook(None, default_hooks.allreduce_hook),
                       uneven(m, o, divide=False)), "user")):
    print(f"ddp_auto_hook: rank {rank}: {name}", file=sys.stderr, flush=True)
    if device in comms:
        for b in list(comms[device].buckets.values()):
            b.free()
        comms[device].buckets.clear()
    if expect == "refused":
        try:
            run(world, train, **options[0] if options else {})
            raise AssertionError(f"rank {rank}: {name}: not refused")
        except RuntimeError as e:
            if REFUSED not in str(e):
                raise
        results.append(f"{name}: refused, naming {REFUSED}")
        continue
    options = options[0] if options else {}
    ours, got = run(world, train, **options)
    hooks = [h for h, _ in ours._comm_hooks]
    # "ours": ddp_hook registered by the script, which on rtd becomes
    # auto_ddp_hook (so that it follows join()) whatever RTD_TORCH_DDP_HOOK.
    want = {"auto": [auto_ddp_hook] if auto else [], "user": [default_hooks.allreduce_hook],
            "ours": [auto_ddp_hook], "ours_default": [auto_ddp_hook], "none": []}[expect]
    if hooks != want:
        raise AssertionError(f"rank {rank}: {name}: comm hooks {hooks}, expected {want} "
                             f"(RTD_TORCH_DDP_HOOK={int(auto)})")
    buckets = len(comms[device].buckets) if device in comms else 0
    # The hook's buckets are the model's (set up by what is alike on every rank).
    if device in comms and any(not isinstance(b.key[0], tuple)
                               for b in comms[device].buckets.values()):
        raise AssertionError(f"rank {rank}: {name}: buckets set up by address: "
                             f"{[b.key for b in comms[device].buckets.values()]}")
    if bool(buckets) != bool(hooks == [auto_ddp_hook]) and "join" not in name:
        raise AssertionError(f"rank {rank}: {name}: {buckets} buckets set up, hooks {hooks}")
    theirs_model, theirs = run(reference, train, **options)
    if [h for h, _ in theirs_model._comm_hooks] != {
            "auto": [], "ours": [rt_dist.torch.ddp_hook], "ours_default": [auto_ddp_hook]}.get(
            expect, [h for h, _ in theirs_model._comm_hooks]):
        raise AssertionError(f"{name}: hooks {theirs_model._comm_hooks} on a group that is not rtd")
    torch.testing.assert_close(got, theirs, rtol=1e-5, atol=1e-6,
                               msg=lambda m: f"rank {rank}: {name}: rtd and reference differ: {m}")
    results.append(f"{name}: hooks {[h.__name__ for h in hooks]}, {buckets} buckets set up, "
                   f"same parameters as the reference")

if auto:
    # A hook registered after rtd's: refused, saying what to do.
    m, _ = run(world, lambda m, o: step(m, o, 0))
    for register in (lambda: m.register_comm_hook(None, default_hooks.allreduce_hook),
                     lambda: m._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)):
        refused(register, "RTD_TORCH_DDP_HOOK=0", "a hook registered after rtd's was not refused")
    results.append("a hook registered after the first forward: refused, naming "
                   "RTD_TORCH_DDP_HOOK=0")
# A bucket's set-up follows its owner (model, generation), alike on every
# rank, not its address, which is each rank's own: the same memory under a
# new generation (DDP rebuilt its buckets) is set up again, and memory that
# moved under the same owner is refused on the rank that sees it.
t = torch.ones(256, device=device)
world.bucket_allreduce(0, t, owner=(-1, 1)).wait()
first = comms[device].buckets[0]
world.bucket_allreduce(0, t, owner=(-1, 1)).wait()
assert comms[device].buckets[0] is first, "the same owner's bucket was set up again"
world.bucket_allreduce(0, t, owner=(-1, 2)).wait()
assert comms[device].buckets[0] is not first, "a new generation kept the old set-up"
assert torch.equal(t, torch.ones_like(t)), "the average of ones is not one"
refused(lambda: world.bucket_allreduce(0, torch.ones(256, device=device), owner=(-1, 2)),
        "memory moved", "a bucket that moved under the same owner was run")
results.append("a bucket is set up again for a new owner, kept for the same one, and "
               "refused where its memory moved under the same owner")
dist.barrier()
if rank == 0:
    for line in results:
        print("ddp_auto_hook: " + line, flush=True)
    print(f"ddp_auto_hook: all agree on {n} ranks ({device}, RTD_TORCH_DDP_HOOK={int(auto)})",
          flush=True)
dist.destroy_process_group()
