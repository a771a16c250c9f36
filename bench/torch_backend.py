"""PyTorch's own DDP and FSDP2 on the nccl and the rtd backend, in one process
and one call, on the reference MLP of torch_anchor.py (same H, L, B):
    dtrun --nproc-per-node=2 python bench/torch_backend.py
Each configuration runs on a nccl group and on an rtd group in turn (so both
see the same GPUs, clocks and neighbours); prints step times, scaling
efficiency against one GPU, peak memory (allocated, the anchor's figure, and
reserved by the caching allocator; and device memory outside torch: NCCL's
and rt_dist's own buffers), all_reduce busbw (fp32, 16 MB to
1 GB) and the cost of a 4-byte all_reduce, and writes JSON to $BENCH_JSON.
DDP also with rt_dist.torch.ddp_hook (on nccl it is PyTorch's allreduce_hook);
plain DDP on rtd gets that hook by itself unless RTD_TORCH_DDP_HOOK=0 (each
DDP configuration's hooks are printed).
Also, on nccl only, floors no backend can beat: DDP whose comm hook returns
each bucket unreduced (DDP's own cost, no transfer), and FSDP2 on a group of
two whose collectives move nothing (its copies in and out, its hooks and its
sharded optimizer step, no transfer); for comparison FSDP2 on a group of one
rank (no transfer, but it steps the whole model, not a half); and DDP
with PyTorch's bf16 compression hook on every backend.
FSDP2 also with rt_dist.torch.fsdp_comms on rtd (its buffers lent by the group;
plain FSDP2 on rtd gets it by itself unless RTD_TORCH_FSDP_COMMS=0: each FSDP2
configuration's lent buffers are printed), and on nccl with PyTorch's
set_allocate_memory_from_process_group_for_comm.
Env: H, L, B (the MLP), BACKENDS (default "nccl rtd rtd_nocopy"), CONFIGS (a
subset of ddp ddp_hook fsdp2 fsdp2_noreshard_bf16 fsdp2_comms
fsdp2_noreshard_bf16_comms fsdp2_comms_rsnccl fsdp2_pgalloc ddp_bf16hook ddp_tail_nccl
ddp_floor_tail_only ddp_floor_no_tail ddp_floor_none ddp_floor_sync (rtd only:
the last DDP bucket by NCCL's kernels; only the last bucket reduced; all but
it; none; one element of the last: the ranks wait for each other once), and the
floors fsdp2_nocopy fsdp2_comms_nocopy, and fsdp2_comms_inplace
fsdp2_noreshard_bf16_comms_inplace fsdp2_comms_held; default all), STEPS,
RTD_TORCH_GEMM_SM_CARVEOUT=N through dtrun's --env (GEMMs by cuBLASLt
leaving N SMs free, for every configuration, the one-GPU step included; 0:
cuBLASLt alone), BUSBW=0 (no all_reduce busbw or 4-byte figures), WINDOWS=1 (each configuration's
timed steps as unix times, for bench/power_windows.py),
FLOORS=0 (leave the floors and the bf16 hook out), PROFILE=DIR with
PROFILE_CONFIGS="fsdp2_nccl fsdp2_rtd floor_fsdp2_null ..." (three more steps
of those configurations under torch.profiler: rank 0's trace in DIR and its
GPU time by kernel in the output, PROFILE_ROWS of them (15);
PROFILE_SORT=self_cpu_time_total: by host
time), SNAPSHOT=DIR (rank 0's allocations and frees during the untimed step
of every configuration, as torch's memory snapshot DIR/<configuration>.pickle;
bench/memory_peak.py tells what is live at its peak).
"""

import gc
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter
from torch.nn.parallel import DistributedDataParallel as DDP

import rt_dist.torch


def skip_copy_out(model):
    """For a timing floor only: FSDP2's copy of each gathered parameter out
    of the all-gather's buffer is left out for model's FSDP modules after
    the first, as if each gather had landed in the unsharded parameters
    themselves. So that the GEMMs still multiply real weights (a GPU held at
    its power limit runs faster on zeros), the unsharded parameters are then
    never freed: they keep what the first copy wrote (one step stale). The
    waits for the gathers stay; the memory is not a floor's."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as param_group_module
    original = param_group_module.foreach_all_gather_copy_out
    if not getattr(original, "_floor", False):
        def copy_out(result, fsdp_params, group):
            if not all(getattr(p, "_copied_once", False) for p in fsdp_params):
                original(result, fsdp_params, group)
                for p in fsdp_params:
                    if hasattr(p, "_copied_once"):
                        p._copied_once = True
                return
            if result.all_gather_event is not None:
                torch.cuda.current_stream().wait_event(result.all_gather_event)
            if isinstance(result.all_gather_work, dist.Work):
                result.all_gather_work.wait()

        copy_out._floor = True
        param_group_module.foreach_all_gather_copy_out = copy_out
    for module in model.modules():
        if isinstance(module, FSDPModule):
            group = module._get_fsdp_state()._fsdp_param_group
            for p in group.fsdp_params if group else []:
                p._copied_once = False
                p.free_unsharded_param = lambda: None


class _Done(dist.Work):
    """A Work that is complete when made (the null group's)."""

    def __init__(self, result):
        super().__init__()
        self._result = result

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(self._result)
        return fut


class _NullGroup(rt_dist.torch.ProcessGroupRTD):
    """A group of the whole world whose collectives move nothing (outputs keep
    whatever they held): FSDP2 on it shards and steps as on two GPUs, with
    every transfer taken out, so its step time is a floor for every backend."""

    def allreduce(self, tensors, opts=None):
        return _Done(tensors)

    def _allgather_base(self, output, input, opts=None):
        return _Done(output)

    def _reduce_scatter_base(self, output, input, opts=None):
        return _Done(output)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return _Done(outputs)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return _Done(outputs)

    def broadcast(self, tensors, opts=None):
        return _Done(tensors)

    def barrier(self, opts=None):
        return _Done(None)


NULL_BACKEND = "rtdnull"
dist.Backend.register_backend(NULL_BACKEND, lambda store, rank, size, timeout: _NullGroup(
    store, rank, size, timeout), devices=["cpu", "cuda"])


class NcclReduceScatter(ReduceScatter):
    """FSDP2's reduce-scatter on another group (its own allocation)."""

    def __init__(self, group):
        self._group = group

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=self._group,
                                          async_op=async_op)


def log(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl")
    n = dist.get_world_size()
    log("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "world", n)
    carveout = torch._C._get_sm_carveout_experimental()
    if carveout is not None:  # RTD_TORCH_GEMM_SM_CARVEOUT, for every configuration
        log(f"GEMMs by cuBLASLt leaving {carveout} of "
            f"{torch.cuda.get_device_properties(dev).multi_processor_count} SMs free")
    groups = {}
    for name in os.environ.get("BACKENDS", "nccl rtd rtd_nocopy").split():
        if name == "nccl":
            groups[name] = dist.new_group(backend="nccl")
        else:
            os.environ["RTD_TORCH_COPY_ENGINES"] = "0" if name == "rtd_nocopy" else "1"
            groups[name] = dist.new_group(backend="rtd")
    res = {"world": n, "torch": torch.__version__}

    # all_reduce busbw, fp32, and the cost of the smallest call (BUSBW=0:
    # left out, so that "outside torch" holds no buffers set up for them).
    busbw = os.environ.get("BUSBW", "1") == "1"
    for mb in (16, 64, 256, 1024) if busbw else ():
        x = torch.randn(mb * (1 << 20) // 4, device=dev)
        for name, g in groups.items():
            for _ in range(5):
                dist.all_reduce(x, group=g)
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(True), torch.cuda.Event(True)
            it = 20
            s.record()
            for _ in range(it):
                dist.all_reduce(x, group=g)
            e.record()
            torch.cuda.synchronize()
            t = s.elapsed_time(e) / 1e3 / it
            bus = mb * (1 << 20) / t / 1e9 * 2 * (n - 1) / n
            log(f"allreduce {name} fp32 {mb}MB {t * 1e3:.3f} ms busbw {bus:.1f} GB/s")
            res[f"allreduce_busbw_{name}_{mb}MB"] = bus
        del x
    tiny = torch.ones(1, device=dev)
    for name, g in groups.items() if busbw else ():
        for _ in range(100):
            dist.all_reduce(tiny, group=g)
        torch.cuda.synchronize()
        it = 2000
        t0 = time.perf_counter()
        for _ in range(it):
            dist.all_reduce(tiny, group=g)
        host = (time.perf_counter() - t0) / it
        torch.cuda.synchronize()
        total = (time.perf_counter() - t0) / it
        log(f"allreduce {name} 4B: {total * 1e6:.1f} us per call, {host * 1e6:.1f} us of host time "
            "to issue it")
        res[f"allreduce_4B_us_{name}"] = total * 1e6
        res[f"allreduce_4B_issue_us_{name}"] = host * 1e6

        # Where the host time goes: the group's own allreduce called straight
        # (torch.distributed's wrapper left out) and, on rtd, the bare C call
        # through ctypes (librt_dist's own cost), each timed to the last issue.
        def issue_us(call):
            for _ in range(100):
                call()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(it):
                call()
            t = (time.perf_counter() - t0) / it
            torch.cuda.synchronize()
            return t * 1e6

        direct = issue_us(lambda: g.allreduce([tiny]))
        line = (f"allreduce {name} 4B host time: the group's allreduce called straight "
                f"{direct:.1f} us")
        res[f"allreduce_4B_direct_us_{name}"] = direct
        comm = getattr(g, "_comms", {}).get("cuda")
        if comm is not None:
            from rt_dist import _codes as codes
            lib, ptr = comm.lib, tiny.data_ptr()

            def bare():
                lib.rtd_work_free(lib.rtd_all_reduce(comm.handle, ptr, ptr, 1, codes.FLOAT32,
                                                     codes.SUM, comm.device, comm.stream()))

            c_us = issue_us(bare)
            line += f", the bare C call {c_us:.1f} us"
            res[f"allreduce_4B_c_us_{name}"] = c_us
        log(line)

    H = int(os.environ.get("H", "8192"))
    L = int(os.environ.get("L", "8"))
    B = int(os.environ.get("B", "8192"))
    steps = int(os.environ.get("STEPS", "15"))

    def mk():
        torch.manual_seed(0)
        return nn.Sequential(*[m for _ in range(L) for m in (nn.Linear(H, H, bias=False),
                                                             nn.GELU())]).to(dev)

    profile_dir = os.environ.get("PROFILE")
    profiled = set(os.environ.get("PROFILE_CONFIGS", "").split())
    profile_sort = os.environ.get("PROFILE_SORT", "cuda_time_total")
    profile_rows = int(os.environ.get("PROFILE_ROWS", "15"))
    snapshot_dir = os.environ.get("SNAPSHOT")
    windows = os.environ.get("WINDOWS") == "1"

    def bench(model, opt, tag, warm=5):
        x = torch.randn(B, H, device=dev)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = model(x)
                loss = y.float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for i in range(warm + steps):
            if i == warm:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                wall0 = time.time()
            step()
        issued = (time.perf_counter() - t0) / steps
        torch.cuda.synchronize()
        t = (time.perf_counter() - t0) / steps
        if windows:  # to match with a clock and power log
            log(f"{tag}: timed steps from {wall0:.3f} to {time.time():.3f} (unix time)")
        # Near the step time: the host sets the pace (or a step waits for the GPU).
        log(f"{tag}: the host issued a step in {issued * 1e3:.2f} ms")
        if profile_dir and tag in profiled:
            profile_steps(tag, step)
        peak = torch.cuda.max_memory_allocated() / 2**30
        # What the caching allocator held at most (freed blocks it keeps,
        # and those whose frees wait on other streams, count here).
        reserved = torch.cuda.max_memory_reserved() / 2**30
        # One more step, untimed: the peak of each phase (where the step's peak lies).
        phases = []
        if snapshot_dir:
            torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
        torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        for part in (lambda: loss.backward(), opt.step, lambda: opt.zero_grad(set_to_none=True)):
            torch.cuda.synchronize()
            phases.append(torch.cuda.max_memory_allocated() / 2**30)
            torch.cuda.reset_peak_memory_stats()
            part()
        torch.cuda.synchronize()
        phases.append(torch.cuda.max_memory_allocated() / 2**30)
        if snapshot_dir:
            if dist.get_rank() == 0:
                os.makedirs(snapshot_dir, exist_ok=True)
                torch.cuda.memory._dump_snapshot(os.path.join(snapshot_dir, f"{tag}.pickle"))
            torch.cuda.memory._record_memory_history(enabled=None)
        log(f"{tag}: peak by phase (GiB): forward {phases[0]:.2f} backward {phases[1]:.2f} "
            f"optimizer {phases[2]:.2f}")
        return t, peak, reserved

    def profile_steps(tag, step):
        """Three more steps under torch.profiler (after the timed ones): rank
        0's Chrome trace to $PROFILE/<tag>.json.gz and its GPU time by kernel."""
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        if dist.get_rank() == 0:
            os.makedirs(profile_dir, exist_ok=True)
            prof.export_chrome_trace(os.path.join(profile_dir, f"{tag}.json.gz"))
            table = prof.key_averages().table(sort_by=profile_sort, row_limit=profile_rows)
            log(f"profile {tag} (3 steps, rank 0):\n{table}")

    def run(tag, make):
        # DDP's and FSDP2's modules hold reference cycles: without a collection
        # the previous configuration's model, gradients and optimizer states
        # would still count in this one's peak.
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        m = make()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
        t, peak, reserved = bench(m, opt, tag)
        # Device memory outside torch's allocator: the CUDA context, NCCL's
        # buffers and rt_dist's staging buffers (which stay with the group).
        free, total = torch.cuda.mem_get_info()
        outside = (total - free - torch.cuda.memory_reserved()) / 2**30
        # DDP's comm hook, the script's or the one rtd registers by itself
        # (RTD_TORCH_DDP_HOOK, default 1).
        hooks = [h.__name__ for h, _ in getattr(m, "_comm_hooks", [])]
        if isinstance(m, DDP):
            log(f"{tag}: DDP comm hooks {hooks or 'none'}")
            res[f"{tag}_hooks"] = hooks
        del m, opt
        return t, peak, outside, reserved

    t1, p1, _, _ = run("single", mk)
    log(f"model params {L * H * H / 1e6:.0f}M tokens/step/rank {B}")
    log(f"single-GPU step {t1 * 1e3:.2f} ms peak {p1:.2f} GiB")
    res.update(single_ms=t1 * 1e3, single_gib=p1)

    def ddp(g, hook=None):
        m = DDP(mk(), device_ids=[torch.cuda.current_device()], process_group=g,
                bucket_cap_mb=25, gradient_as_bucket_view=True)
        if hook is not None:
            m.register_comm_hook(g, hook)
        return m

    def unreduced(_state, bucket):
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    # Where DDP's time over its floor goes on rtd: only the last bucket reduced
    # (the one nothing overlaps), or all but it (floors: wrong results); and
    # the last bucket by NCCL's kernels in place, the others by copy engines.
    def tail_only(state, bucket):
        return (rt_dist.torch.ddp_hook if bucket.is_last() else unreduced)(state, bucket)

    def no_tail(state, bucket):
        return (unreduced if bucket.is_last() else rt_dist.torch.ddp_hook)(state, bucket)

    def sync_only(state, bucket):
        # No transfer but one element of the last bucket: the ranks wait for
        # each other once a step, as any reduction makes them.
        if not bucket.is_last():
            return unreduced(state, bucket)
        buf = bucket.buffer()
        return state.allreduce([buf[:1]]).get_future().then(lambda _: buf)

    def tail_nccl(state, bucket):
        if not bucket.is_last():
            return rt_dist.torch.ddp_hook(state, bucket)
        work = state.bucket_allreduce(bucket.index(), bucket.buffer(), copy_engines=False)
        return work.get_future().then(lambda fut: fut.value()[0])

    def fsdp(g, reshard, reduce_dtype, comms=False, pg_alloc=False, rs_nccl=False,
             no_copy_out=False, land=None, park=None):
        def make():
            m = mk()
            mesh = DeviceMesh.from_group(g, "cuda")
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)
            for layer in m:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
            fully_shard(m, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
            if comms:
                rt_dist.torch.fsdp_comms(m, land=land, park=park)
            if rs_nccl:  # the gathers as fsdp_comms has them, the reductions on nccl
                for mod in m.modules():
                    if isinstance(mod, FSDPModule) and mod._get_fsdp_state()._fsdp_param_group:
                        mod.set_custom_reduce_scatter(NcclReduceScatter(groups["nccl"]))
            if pg_alloc:  # PyTorch's own: buffers from the group's allocator (NCCL's)
                m.set_allocate_memory_from_process_group_for_comm(True)
            if no_copy_out:
                skip_copy_out(m)
            return m
        return make

    configs = [
        ("ddp", lambda g: (lambda: ddp(g))),
        # rt_dist's hook: each bucket set up once (on nccl: PyTorch's allreduce_hook).
        ("ddp_hook", lambda g: (lambda: ddp(g, rt_dist.torch.ddp_hook))),
        ("fsdp2", lambda g: fsdp(g, True, torch.float32)),
        ("fsdp2_noreshard_bf16", lambda g: fsdp(g, False, torch.bfloat16)),
        # rt_dist.torch.fsdp_comms: FSDP2's buffers lent by the group (rtd only).
        ("fsdp2_comms", lambda g: fsdp(g, True, torch.float32, comms=True)),
        ("fsdp2_noreshard_bf16_comms", lambda g: fsdp(g, False, torch.bfloat16, comms=True)),
        # fsdp_comms with each gather in FSDP2's buffer, copied out by FSDP2
        # (by default it lands in the parameters).
        ("fsdp2_comms_inplace", lambda g: fsdp(g, True, torch.float32, comms=True, land=False)),
        ("fsdp2_noreshard_bf16_comms_inplace", lambda g: fsdp(g, False, torch.bfloat16,
                                                              comms=True, land=False)),
        # fsdp_comms holding its lent buffers all step (by default they are
        # parked at the end of the forward and of the backward).
        ("fsdp2_comms_held", lambda g: fsdp(g, True, torch.float32, comms=True, park=False)),
        # fsdp_comms' gathers, but each reduce-scatter by NCCL's kernel in FSDP2's own
        # buffer (PyTorch's nccl group): which of the two a reduction costs the GEMMs less.
        ("fsdp2_comms_rsnccl", lambda g: fsdp(g, True, torch.float32, comms=True, rs_nccl=True)),
        # The last bucket by NCCL's kernels in place, and the two floors (rtd only).
        ("ddp_tail_nccl", lambda g: (lambda: ddp(g, tail_nccl))),
        ("ddp_floor_tail_only", lambda g: (lambda: ddp(g, tail_only))),
        ("ddp_floor_no_tail", lambda g: (lambda: ddp(g, no_tail))),
        ("ddp_floor_none", lambda g: (lambda: ddp(g, unreduced))),
        ("ddp_floor_sync", lambda g: (lambda: ddp(g, sync_only))),
        # PyTorch's own route to the same end, on nccl only.
        ("fsdp2_pgalloc", lambda g: fsdp(g, True, torch.float32, pg_alloc=True)),
        # Floors (wrong results): FSDP2's copy of each gathered parameter out of
        # the all-gather's buffer left out, as if the gather landed in place.
        ("fsdp2_nocopy", lambda g: fsdp(g, True, torch.float32, no_copy_out=True)),
        ("fsdp2_comms_nocopy", lambda g: fsdp(g, True, torch.float32, comms=True, land=False,
                                               no_copy_out=True)),
    ]
    chosen = os.environ.get("CONFIGS", "").split()
    if chosen:
        configs = [c for c in configs if c[0] in chosen]
    floors = os.environ.get("FLOORS", "1") == "1"
    if floors:
        configs.append(("ddp_bf16hook",
                        lambda g: (lambda: ddp(g, default_hooks.bf16_compress_hook))))
    for tag, maker in configs:
        for name, g in groups.items():
            if "_comms" in tag and name == "nccl":
                continue  # fsdp_comms leaves a nccl group's FSDP2 as it is
            if tag.endswith("_rsnccl") and "nccl" not in groups:
                continue
            if tag.endswith("_pgalloc") and name != "nccl":
                continue
            if tag.startswith(("ddp_tail", "ddp_floor")) and not name.startswith("rtd"):
                continue
            t, p, o, r = run(f"{tag}_{name}", maker(g))
            if tag.startswith("ddp") and "cuda" in getattr(g, "_comms", {}):
                # The hooks that call ddp_hook or bucket_allreduce themselves
                # key buckets by address alone: none may outlive its model.
                buckets = g._comms["cuda"].buckets
                for b in buckets.values():
                    b.free()
                buckets.clear()
            # fsdp_comms's hooks: set by the configuration, or (RTD_TORCH_FSDP_COMMS,
            # default 1) by fully_shard itself on every FSDP2 model of an rtd group.
            comm = getattr(g, "_comms", {}).get("cuda")
            if comm is not None and any(comm.slots.stats[k] for k in
                                        ("all_gather", "landed", "reduce_scatter")):
                slots = comm.slots
                held = {k: f"{c} buffers, {b / 2**30:.3f} GiB" for k, (c, _, b) in
                        slots.held().items()}
                log(f"{tag} {name}: lent buffers {slots.stats} by {sorted(slots.methods)}; "
                    f"held {held}")
                gc.collect()
                g.release_shard_buffers()  # counted in this configuration's peak, not the next
            log(f"{tag} {name} step {t * 1e3:.2f} ms peak {p:.2f} GiB  eff {t1 / t:.3f}  "
                f"(reserved {r:.2f} GiB, outside torch {o:.2f} GiB)")
            res[f"{tag}_{name}_ms"] = t * 1e3
            res[f"{tag}_{name}_gib"] = p
            res[f"{tag}_{name}_reserved_gib"] = r
            res[f"{tag}_{name}_outside_gib"] = o
            res[f"{tag}_{name}_eff"] = t1 / t
    if floors and "nccl" in groups:
        # Each rank alone in a group of its own (new_group is collective: all make all).
        alone = [dist.new_group([r], backend="nccl") for r in range(n)][dist.get_rank()]
        null = dist.new_group(backend=NULL_BACKEND)
        for tag, make in (("floor_ddp_unreduced", lambda: ddp(groups["nccl"], unreduced)),
                          ("floor_fsdp2_null", fsdp(null, True, torch.float32)),
                          ("floor_fsdp2_noreshard_bf16_null", fsdp(null, False, torch.bfloat16)),
                          ("floor_fsdp2_alone", fsdp(alone, True, torch.float32)),
                          ("floor_fsdp2_noreshard_bf16_alone", fsdp(alone, False, torch.bfloat16))):
            t, p, _, _ = run(tag, make)
            log(f"{tag} step {t * 1e3:.2f} ms peak {p:.2f} GiB  eff {t1 / t:.3f}")
            res[f"{tag}_ms"] = t * 1e3
            res[f"{tag}_gib"] = p
            res[f"{tag}_eff"] = t1 / t
    if dist.get_rank() == 0 and os.environ.get("BENCH_JSON"):
        with open(os.environ["BENCH_JSON"], "w") as f:
            json.dump(res, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
