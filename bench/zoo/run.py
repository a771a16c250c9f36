"""The transformer zoo (bench/zoo/models.py) trained by PyTorch's DDP and
FSDP2 on nccl and on rtd, in one job on the same GPUs:
    dtrun --nproc-per-node=2 python bench/zoo/run.py
Each case (model x mode) runs ROUNDS rounds; in each round every backend
trains a fresh copy of the model (same seed) for WARM untimed and STEPS timed
steps, the backends' order rotating from round to round. Prints, per case
and backend, the median step time over the rounds with its spread
((max - min) / median), tokens per second and peak allocated memory, and
rtd's speed against nccl; writes JSON to $BENCH_JSON.
Env: MODELS (names in models.SHAPES; default all), MODES (ddp fsdp2
fsdp2_noreshard fsdp2_bf16; default all), BACKENDS (default "nccl rtd"),
ROUNDS (3), STEPS (8), WARM (3), COMPILE=1 (torch.compile on each block),
A backend may carry settings for its group: "rtd:RTD_TORCH_COPY_ENGINES=1"
(variables set while the group is made) or "nccl:high" (ProcessGroupNCCL's
high-priority stream); each such variant is compared with plain nccl.
PROFILE=N (after the rounds, 3 steps of each backend under torch.profiler:
rank 0's N costliest GPU kernels and the communication kernels' total).
FSDP2: bf16 parameters, fp32 reductions (fsdp2_bf16: bf16 reductions),
resharding after forward except in fsdp2_noreshard. DDP: bf16 parameters.
Optimizer: AdamW (foreach).
"""

import gc
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import LM, SHAPES  # noqa: E402

MODES = ("ddp", "fsdp2", "fsdp2_noreshard", "fsdp2_bf16")


def build(shape, mode, group, device, compiled):
    torch.manual_seed(0)
    with torch.device(device):
        model = LM(shape)
    if compiled:
        for blk in model.blocks:
            blk.compile()
    if mode == "ddp":
        model = DDP(model.to(torch.bfloat16), process_group=group)
    else:
        mesh = DeviceMesh.from_group(group, device_type="cuda")
        reduce = torch.bfloat16 if mode == "fsdp2_bf16" else torch.float32
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce)
        reshard = mode != "fsdp2_noreshard"
        for blk in model.blocks:
            fully_shard(blk, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    return model, opt


def measure(shape, mode, group, device, warm, steps, compiled, profile=0):
    model, opt = build(shape, mode, group, device, compiled)
    g = torch.Generator(device=device).manual_seed(1 + dist.get_rank())
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.seq), device=device, generator=g)

    def step():
        loss = model(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    dist.barrier(group=group)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - t0) / steps
    peak = torch.cuda.max_memory_allocated()
    value = loss.item()
    if profile:
        from torch.profiler import ProfilerActivity, profile as profiler

        with profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        if dist.get_rank() == 0:
            events = [e for e in prof.key_averages() if e.device_time_total > 0]
            events.sort(key=lambda e: -e.device_time_total)
            comm = sum(e.device_time_total for e in events if "nccl" in e.key.lower()
                       or "rtd" in e.key.lower())
            print(f"profile: communication kernels {comm / 3e3:.2f} ms a step; costliest:",
                  flush=True)
            for e in events[:profile]:
                print(f"profile:   {e.device_time_total / 3e3:8.2f} ms {e.count // 3:5d}x "
                      f"{e.key[:90]}", flush=True)
    model = opt = tokens = None  # freed before the cache is emptied (step() holds them)
    gc.collect()
    torch.cuda.empty_cache()
    return seconds, peak, value


def make_group(spec):
    """A group for a BACKENDS entry: "name" or "name:VAR=VAL:..." / "nccl:high"."""
    name, *settings = spec.split(":")
    saved = {}
    options = None
    for s in settings:
        if name == "nccl" and s == "high":
            options = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)
            continue
        var, eq, value = s.partition("=")
        if not eq:
            raise SystemExit(f"zoo: backend setting {s!r} in {spec!r}: use VAR=VALUE")
        saved[var] = os.environ.get(var)
        os.environ[var] = value
    try:
        group = dist.new_group(backend=name, pg_options=options)
        # librt_dist's communicator is made at the first call: make it now,
        # while the variables hold.
        dist.all_reduce(torch.ones(1, device="cuda"), group=group)
    finally:
        for var, old in saved.items():
            if old is None:
                os.environ.pop(var)
            else:
                os.environ[var] = old
    return group


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    backends = os.environ.get("BACKENDS", "nccl rtd").split()
    groups = {b: make_group(b) for b in backends}
    models = os.environ.get("MODELS", " ".join(SHAPES)).split()
    modes = os.environ.get("MODES", " ".join(MODES)).split()
    rounds, steps = int(os.environ.get("ROUNDS", "3")), int(os.environ.get("STEPS", "8"))
    warm, compiled = int(os.environ.get("WARM", "3")), os.environ.get("COMPILE") == "1"
    profile = int(os.environ.get("PROFILE", "0"))
    impl = os.environ.get("RTD_TORCH_IMPL", "cpp")

    def log(*a):
        if rank == 0:
            print(*a, flush=True)

    log(f"zoo: torch {torch.__version__}, {world} x {torch.cuda.get_device_name(device)}, "
        f"rtd impl {impl}, copy engines {os.environ.get('RTD_TORCH_COPY_ENGINES', 'default')}, "
        f"{rounds} rounds x {steps} steps, compile {compiled}")
    others = [b for b in backends if b != "nccl"] if "nccl" in backends else []
    results = []
    for name in models:
        shape = SHAPES[name]
        for mode in modes:
            times = {b: [] for b in backends}
            peaks, losses = {}, {}
            for r in range(rounds):
                order = backends[r % len(backends):] + backends[:r % len(backends)]
                for b in order:
                    t, peak, loss = measure(shape, mode, groups[b], device, warm, steps, compiled)
                    times[b].append(t)
                    peaks[b] = max(peaks.get(b, 0), peak)
                    losses[b] = loss
            row = {"model": name, "params": shape.params(), "mode": mode, "seq": shape.seq,
                   "batch": shape.batch, "world": world, "impl": impl, "compile": compiled}
            for b in backends:
                med = statistics.median(times[b])
                row[b] = {"step_ms": med * 1e3, "rounds_ms": [t * 1e3 for t in times[b]],
                          "spread": (max(times[b]) - min(times[b])) / med,
                          "tokens_per_s": shape.batch * shape.seq * world / med,
                          "peak_gib": peaks[b] / 2**30, "loss": losses[b]}
            results.append(row)
            for b in backends if profile else ():
                log(f"profile: {name} {mode} on {b}")
                measure(shape, mode, groups[b], device, 1, 1, compiled, profile)
            line = f"{name:10} {mode:16}"
            for b in backends:
                x = row[b]
                line += (f" | {b} {x['step_ms']:8.1f} ms ±{x['spread'] * 50:4.1f}% "
                         f"{x['tokens_per_s'] / 1e3:7.1f} ktok/s {x['peak_gib']:5.1f} GiB")
            for b in others:
                line += f" | {b}/nccl speed {row['nccl']['step_ms'] / row[b]['step_ms']:.3f}"
            log(line)
    for b in others if results else ():
        ratios = [r["nccl"]["step_ms"] / r[b]["step_ms"] for r in results]
        gm = statistics.geometric_mean(ratios)
        log(f"zoo: {b}/nccl speed, geometric mean over {len(ratios)} cases: {gm:.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    path = os.environ.get("BENCH_JSON")
    if path and rank == 0:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
