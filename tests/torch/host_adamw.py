"""rt_dist.torch.HostAdamW against torch.optim.AdamW (under dtrun, 2 ranks, CPU):
    dtrun --nproc-per-node=2 python tests/torch/host_adamw.py [rtd|gloo]

- every rank: the same steps as torch.optim.AdamW to float32 rounding, with
  two parameter groups (their own lr and weight decay), maximize, bfloat16
  gradients, a parameter large enough for the thread team, tensors of zero
  and one element; the state dict loads into torch.optim.AdamW and back, and
  both go on alike; what is refused is refused with a message naming it;
- FSDP2 over the group (rtd or gloo): a sharded model trained by HostAdamW
  ends as the one trained by torch.optim.AdamW; its optimizer state goes
  through torch.distributed.checkpoint (save, load into a fresh model and
  optimizer) and the two go on alike; with in_backward=True (each parameter
  stepped as its reduced gradient lands) the same parameters, bit for bit.
"""

import gc
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

import rt_dist.torch  # noqa: F401  (under dtrun `import torch` has loaded it already)
from rt_dist.torch import HostAdamW

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "rtd"
RTOL, ATOL = 2e-5, 1e-7  # float32 rounding: the two compute the step in other orders
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"rank {os.environ.get('RANK')}: FAILED: {what}", flush=True)


def close(a, b):
    return torch.allclose(a, b, rtol=RTOL, atol=ATOL)


def gap(a, b):
    return (a - b).abs().max().item() if a.numel() else 0.0


def params(seed, shapes):
    g = torch.Generator().manual_seed(seed)
    return [nn.Parameter(torch.randn(s, generator=g)) for s in shapes]


def set_grads(ps, step, dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 + step)
    for p in ps:
        if dtype != p.dtype:
            p.grad_dtype = None  # torch checks a gradient's dtype against the parameter's
        p.grad = torch.randn(p.shape, generator=g).to(dtype)


def same_steps(name, make_groups, steps=5, grad_dtype=torch.float32, threads=None, **kw):
    """HostAdamW and torch.optim.AdamW from the same start, on the same gradients."""
    ours_p = params(0, SHAPES)
    theirs_p = params(0, SHAPES)
    ours = HostAdamW(make_groups(ours_p), threads=threads, **kw)
    theirs = torch.optim.AdamW(make_groups(theirs_p), foreach=False, **kw)
    for step in range(steps):
        set_grads(ours_p, step, grad_dtype)
        set_grads(theirs_p, step, grad_dtype)
        for p in theirs_p:  # AdamW wants the parameter's dtype; bf16 values are exact in fp32
            p.grad = p.grad.float()
        ours.step()
        theirs.step()
    for i, (a, b) in enumerate(zip(ours_p, theirs_p)):
        check(close(a, b), f"{name}: parameter {i} differs from torch.optim.AdamW's by "
                           f"{gap(a, b):.3g}")
        for key in ("exp_avg", "exp_avg_sq"):
            check(close(ours.state[a][key], theirs.state[b][key]), f"{name}: {key} of {i}")
        check(ours.state[a]["step"].item() == steps, f"{name}: step of {i}")
    return ours, theirs, ours_p, theirs_p


# Shapes: a matrix, a vector, one and zero elements, and one of 300k floats
# (the team splits it among its threads).
SHAPES = [(64, 33), (17,), (1,), (0,), (300_000,)]


def one_group(ps):
    return ps


def two_groups(ps):
    return [{"params": ps[:2], "lr": 3e-3, "weight_decay": 0.0},
            {"params": ps[2:], "lr": 1e-2, "weight_decay": 0.3}]


def single_process_cases():
    same_steps("defaults", one_group)
    same_steps("two groups", two_groups, lr=1e-3, betas=(0.8, 0.99), eps=1e-6)
    same_steps("maximize", one_group, maximize=True, weight_decay=0.05)
    same_steps("bfloat16 gradients", one_group, grad_dtype=torch.bfloat16, lr=2e-3)
    same_steps("one thread", one_group, threads=1)
    same_steps("four threads", one_group, threads=4, weight_decay=0.2)

    # The state dict goes both ways, and both go on alike.
    ours, theirs, ours_p, theirs_p = same_steps("round trip", two_groups, lr=1e-3)
    fresh_theirs = torch.optim.AdamW(two_groups(ours_p), foreach=False, lr=1e-3)
    fresh_theirs.load_state_dict(ours.state_dict())
    fresh_ours = HostAdamW(two_groups(theirs_p), lr=1e-3)
    fresh_ours.load_state_dict(theirs.state_dict())
    ours_state = {k: v.clone() for k, v in enumerate(ours_p)}
    set_grads(ours_p, 99)
    set_grads(theirs_p, 99)
    fresh_theirs.step()  # torch's AdamW on the state HostAdamW left
    fresh_ours.step()    # HostAdamW on the state torch's AdamW left
    for i, (a, b) in enumerate(zip(ours_p, theirs_p)):
        check(close(a, b), f"round trip: parameter {i} after the swapped optimizers' step")
        check(not torch.equal(a, ours_state[i]) or a.numel() == 0, f"round trip: {i} moved")

    # Refusals, each naming what is wrong.
    def refused(fn, words, what):
        try:
            fn()
        except (ValueError, RuntimeError) as e:
            check(all(w in str(e) for w in words), f"{what}: the message '{e}' lacks {words}")
            return
        check(False, f"{what} was accepted")

    refused(lambda: HostAdamW(params(0, [(3,)]), amsgrad=True), ["amsgrad"], "amsgrad")
    refused(lambda: HostAdamW(params(0, [(3,)]), threads=0), ["threads 0"], "threads=0")
    refused(lambda: HostAdamW(params(0, [(3,)]), betas=(1.0, 0.9)), ["betas"], "beta1 = 1")
    p64 = nn.Parameter(torch.zeros(4, dtype=torch.float64))
    p64.grad = torch.zeros(4, dtype=torch.float64)
    refused(HostAdamW([p64]).step, ["float32", "float64"], "a float64 parameter")
    ph = nn.Parameter(torch.zeros(4))
    ph.grad_dtype = None
    ph.grad = torch.zeros(4, dtype=torch.float16)
    refused(HostAdamW([ph]).step, ["float16"], "a float16 gradient")
    # A bad hyperparameter set after construction is refused by the library,
    # and no tensor is stepped nor counted.
    pb = params(0, [(8,), (8,)])
    set_grads(pb, 0)
    bad = HostAdamW([{"params": pb[:1]}, {"params": pb[1:], "eps": float("nan")}])
    before = [p.detach().clone() for p in pb]
    refused(bad.step, ["tensor 1", "not finite"], "a NaN eps")
    check(all(torch.equal(a, b) for a, b in zip(pb, before)), "a refused step changed nothing")
    check(all(not bad.state[p] or bad.state[p]["step"].item() == 0 for p in pb),
          "a refused step advanced no step counter")


def fsdp_cases():
    torch.manual_seed(0)

    def model():
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32), nn.GELU(),
                          nn.Linear(32, 4))
        for layer in m:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(m)
        return m

    def train(m, opt, first, last):
        for step in range(first, last):
            g = torch.Generator().manual_seed(step * 10 + dist.get_rank())
            x = torch.randn(16, 32, generator=g)
            y = torch.randn(16, 4, generator=g)
            loss = nn.functional.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()

    ours_m, theirs_m, during_m = model(), model(), model()
    ours = HostAdamW(ours_m.parameters(), lr=1e-2, weight_decay=0.1)
    theirs = torch.optim.AdamW(theirs_m.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    during = HostAdamW(during_m.parameters(), lr=1e-2, weight_decay=0.1, in_backward=True)
    train(ours_m, ours, 0, 4)
    train(theirs_m, theirs, 0, 4)
    train(during_m, during, 0, 4)
    for (name, a), b, c in zip(ours_m.named_parameters(), theirs_m.parameters(),
                               during_m.parameters()):
        check(close(a.full_tensor(), b.full_tensor()), f"FSDP2: {name} after 4 steps")
        check(torch.equal(a.full_tensor(), c.full_tensor()),
              f"FSDP2: {name} stepped in backward differs from stepped after it")
        check(during.state[c]["step"].item() == 4, f"FSDP2 in backward: {name}'s step count")
    n_params = len(list(during_m.parameters()))
    check(during.stepped_in_backward == n_params,
          f"{during.stepped_in_backward} of {n_params} parameters stepped in backward")
    # A state dict loaded makes new parameter groups: their settings are used.
    during.load_state_dict(during.state_dict())
    for group in during.param_groups:
        group["lr"] = 0.0
    before = [p.full_tensor() for p in during_m.parameters()]
    train(during_m, during, 4, 5)
    decayed = all(torch.equal(a, b.full_tensor()) for a, b in zip(before, during_m.parameters()))
    check(decayed, "in backward: lr 0 set after load_state_dict moved the parameters")

    # Two backwards with gradient sync before one step(): refused at step(),
    # the first one's steps kept (they were taken), the next step fine.
    for _ in range(2):
        x = torch.randn(16, 32, generator=torch.Generator().manual_seed(7))
        nn.functional.mse_loss(during_m(x), torch.zeros(16, 4)).backward()
    try:
        during.step()
        check(False, "in backward: two backwards before step() were accepted")
    except RuntimeError as e:
        check("landed twice" in str(e), f"in backward: the refusal '{e}' says why")
    during.zero_grad()
    train(during_m, during, 5, 6)

    # An optimizer closed or dropped leaves no hook behind.
    def hooks():
        return sum(len(getattr(p, "_post_accumulate_grad_hooks", None) or {})
                   for p in during_m.parameters())
    n_hooks = hooks()
    extra = HostAdamW(during_m.parameters(), in_backward=True)
    check(hooks() == n_hooks + n_params, "in backward: a hook on every parameter")
    extra.close()
    check(hooks() == n_hooks, "in backward: close() removes the hooks")
    extra = HostAdamW(during_m.parameters(), in_backward=True)
    del extra
    gc.collect()
    check(hooks() == n_hooks, "in backward: a dropped optimizer's hooks are removed")
    try:
        HostAdamW(params(0, [(3,)]), in_backward=True)
        check(False, "in_backward with parameters not FSDP2's was accepted")
    except ValueError as e:
        check("FSDP2" in str(e), f"in_backward's refusal '{e}' names FSDP2")

    # Through DCP: saved, loaded into a fresh model and optimizer, then both go on.
    root = [tempfile.mkdtemp(prefix="host_adamw_dcp_") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(root, src=0)
    msd, osd = get_state_dict(ours_m, ours)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=root[0])
    again_m = model()
    again = HostAdamW(again_m.parameters(), lr=1e-2, weight_decay=0.1)
    msd2, osd2 = get_state_dict(again_m, again)
    state = {"model": msd2, "optim": osd2}
    dcp.load(state, checkpoint_id=root[0])
    set_state_dict(again_m, again, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    train(ours_m, ours, 4, 6)
    train(again_m, again, 4, 6)
    for (name, a), b in zip(ours_m.named_parameters(), again_m.parameters()):
        check(torch.equal(a.full_tensor(), b.full_tensor()),
              f"DCP: {name} after the reload and 2 more steps")


def main():
    dist.init_process_group(BACKEND)
    single_process_cases()
    fsdp_cases()
    bad = torch.tensor([len(failures)])
    dist.all_reduce(bad)
    if dist.get_rank() == 0:
        kernel = HostAdamW([nn.Parameter(torch.zeros(1))]).kernel
        print(f"host_adamw on {BACKEND}: {'ok' if bad.item() == 0 else 'FAILED'} "
              f"(kernel {kernel}, {HostAdamW([nn.Parameter(torch.zeros(1))]).threads} threads)")
    dist.destroy_process_group()
    sys.exit(1 if bad.item() else 0)


if __name__ == "__main__":
    main()
