"""Every collective of the rtd backend against gloo's (or, on GPUs, nccl's) result, in one process
group each, for every dtype and reduction (run under dtrun, 2 or more ranks):
    dtrun --nproc-per-node=N python tests/torch/collectives.py [cpu|cuda]
Prints "collectives: N checks passed" on rank 0; raises on the first mismatch.
"""

import sys
import time
import weakref

import torch
import torch.distributed as dist

import rt_dist.torch  # noqa: F401
from rtd_impl import IMPL

# rt_dist.torch is imported by `import torch` itself (its entry point): it must
# not pull in FSDP2, which takes most of a second to import.
assert "torch.distributed.fsdp" not in sys.modules, "rt_dist.torch imported FSDP2"
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if device == "cuda":
    torch.cuda.set_device(int(__import__("os").environ["LOCAL_RANK"]))
dist.init_process_group("rtd")
rank, n = dist.get_rank(), dist.get_world_size()
rtd = dist.group.WORLD
# The reference: gloo on CPU, nccl on GPUs.
reference = dist.new_group(backend="nccl" if device == "cuda" else "gloo")
checks = 0

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16, torch.float16]
R = dist.ReduceOp


def on(t):
    return t.to(device)


def same(what, ours, theirs):
    global checks
    ours, theirs = ours.cpu(), theirs.cpu()
    if ours.dtype != theirs.dtype or ours.shape != theirs.shape or not torch.equal(ours, theirs):
        raise AssertionError(
            f"rank {rank}: {what}: rtd {ours.tolist()} != reference {theirs.tolist()}")
    checks += 1


def values(dtype, count, salt=0):
    # Small integers: every dtype holds them and every order of summing gives the same.
    base = torch.arange(count, dtype=torch.int64) % 7 + rank * 3 + salt
    return base.to(dtype)


def both(fn):
    """Runs fn(group) on rtd and on the reference, with tensors made fresh for each."""
    return fn(rtd), fn(reference)


for dtype in DTYPES:
    name = str(dtype).replace("torch.", "")
    for op in (R.SUM, R.MIN, R.MAX, R.AVG):
        if op == R.AVG and not dtype.is_floating_point:
            continue
        def reduce(group, op=op):
            t = on(values(dtype, 37))
            if group is reference and device == "cpu" and op == R.AVG:  # gloo has no AVG
                t = t.to(torch.float64)
                dist.all_reduce(t, op=R.SUM, group=group)
                return (t / n).to(dtype)
            dist.all_reduce(t, op=op, group=group)
            return t
        ours, theirs = both(reduce)
        if op == R.AVG:
            torch.testing.assert_close(ours.cpu().double(), theirs.cpu().double(), rtol=1e-2,
                                       atol=1e-2)
            checks += 1
        else:
            same(f"all_reduce {name} {op}", ours, theirs)

    def bcast(group):
        t = on(values(dtype, 11))
        dist.broadcast(t, src=n - 1, group=group)
        return t
    same(f"broadcast {name}", *both(bcast))

    def gather_into(group):
        out = on(torch.zeros(5 * n, dtype=dtype))
        dist.all_gather_into_tensor(out, on(values(dtype, 5)), group=group)
        return out
    same(f"all_gather_into_tensor {name}", *both(gather_into))

    def gather_list(group):
        outs = [on(torch.zeros(3, dtype=dtype)) for _ in range(n)]
        dist.all_gather(outs, on(values(dtype, 3)), group=group)
        return torch.cat(outs)
    same(f"all_gather {name}", *both(gather_list))

    for op in (R.SUM, R.MAX):
        def rs(group, op=op):
            out = on(torch.zeros(4, dtype=dtype))
            dist.reduce_scatter_tensor(out, on(values(dtype, 4 * n)), op=op, group=group)
            return out
        if device == "cpu":  # gloo has no reduce_scatter_tensor: the expected slice
            full = on(values(dtype, 4 * n))
            t = full.clone()
            dist.all_reduce(t, op=op, group=reference)
            same(f"reduce_scatter_tensor {name} {op}", rs(rtd), t[rank * 4:(rank + 1) * 4])
        else:
            same(f"reduce_scatter_tensor {name} {op}", *both(rs))

    def a2a(group):
        out = on(torch.zeros(2 * n, dtype=dtype))
        dist.all_to_all_single(out, on(values(dtype, 2 * n)), group=group)
        return out
    same(f"all_to_all_single {name}", *both(a2a))

    def a2a_uneven(group):
        # rank r sends r + j + 1 elements to rank j.
        ins = [on(values(dtype, rank + j + 1, salt=j)) for j in range(n)]
        out_sizes = [j + rank + 1 for j in range(n)]
        out = on(torch.zeros(sum(out_sizes), dtype=dtype))
        dist.all_to_all_single(out, torch.cat(ins), output_split_sizes=out_sizes,
                               input_split_sizes=[i.numel() for i in ins], group=group)
        return out
    same(f"all_to_all_single uneven {name}", *both(a2a_uneven))

    def p2p(group):
        t = on(values(dtype, 6))
        if rank == 0:
            dist.send(t, dst=1, group=group)
        elif rank == 1:
            t = on(torch.zeros(6, dtype=dtype))
            dist.recv(t, src=0, group=group)
        return t
    same(f"send/recv {name}", *both(p2p))

# Large enough for the copy-engine path on GPUs (from 1 MiB), in place and
# out of place (a view into a larger tensor), sum and average.
for dtype in (torch.float32, torch.bfloat16):
    for op in (R.SUM, R.AVG):
        big = on(values(dtype, (1 << 20) + 3, salt=1))
        big_ref = big.clone()
        dist.all_reduce(big, op=op)
        if device == "cpu" and op == R.AVG:
            dist.all_reduce(big_ref, op=R.SUM, group=reference)
            big_ref = (big_ref.double() / n).to(dtype)
        else:
            dist.all_reduce(big_ref, op=op, group=reference)
        torch.testing.assert_close(big.cpu().double(), big_ref.cpu().double(), rtol=1e-2,
                                   atol=1e-2)
        checks += 1
# All-gathers and reduce-scatters large enough for the copy-engine path (from
# 1 MiB moved), into a fresh output and in place (the input a block of the
# output, as FSDP2 gathers), with a count that leaves the blocks unaligned.
for dtype in (torch.float32, torch.bfloat16):
    for k in (1 << 19, (1 << 19) + 3):  # elements per rank
        name = f"{str(dtype).replace('torch.', '')} x {k}"
        mine = on(values(dtype, k, salt=2))
        ref = on(torch.zeros(k * n, dtype=dtype))
        dist.all_gather_into_tensor(ref, mine.clone(), group=reference)
        out = on(torch.zeros(k * n, dtype=dtype))
        dist.all_gather_into_tensor(out, mine)
        same(f"large all_gather_into_tensor {name}", out, ref)
        buf = on(torch.zeros(k * n, dtype=dtype))
        buf[rank * k:(rank + 1) * k].copy_(mine)
        dist.all_gather_into_tensor(buf, buf[rank * k:(rank + 1) * k])
        same(f"large all_gather_into_tensor in place {name}", buf, ref)
        full = on(values(dtype, k * n, salt=3))
        summed = full.clone()
        dist.all_reduce(summed, group=reference)
        for op in (R.SUM, R.AVG):
            o = on(torch.zeros(k, dtype=dtype))
            dist.reduce_scatter_tensor(o, full, op=op)
            want = summed[rank * k:(rank + 1) * k]
            if op == R.SUM:
                same(f"large reduce_scatter_tensor sum {name}", o, want)
            else:
                torch.testing.assert_close(o.cpu().double(), want.cpu().double() / n, rtol=1e-2,
                                           atol=1e-2)
                checks += 1
holder = on(torch.zeros(3 << 20))
part = holder[1 << 20:(1 << 20) + (1 << 19)]
part.copy_(on(values(torch.float32, 1 << 19)))
dist.all_reduce(part)
ref = on(values(torch.float32, 1 << 19))
dist.all_reduce(ref, group=reference)
same("all_reduce of a view", part, on(ref))
same("all_reduce leaves the rest", holder[:1 << 20], on(torch.zeros(1 << 20)))

# Straight on the process group, with no options (a sum) and with options.
t = on(values(torch.float32, 5))
rtd.allreduce([t]).wait()
ref = on(values(torch.float32, 5))
dist.all_reduce(ref, group=reference)
same("allreduce straight, no options", t, ref)
opts = dist.AllreduceOptions()
opts.reduceOp = R.MAX
t = on(values(torch.float32, 5))
rtd.allreduce([t], opts).wait()
ref = on(values(torch.float32, 5))
dist.all_reduce(ref, op=R.MAX, group=reference)
same("allreduce straight, max", t, ref)

# Coalesced forms, straight on the process group (as FSDP2 and DDP reach them).
ts = [on(values(torch.float32, k)) for k in (3, 5, 8)]
work = rtd.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions())
work.wait()
for k, t in zip((3, 5, 8), ts):
    ref = on(values(torch.float32, k))
    dist.all_reduce(ref, group=reference)
    same(f"allreduce_coalesced x{k}", t, on(ref))
outs = [on(torch.zeros(k * n)) for k in (2, 4)]
ins = [on(values(torch.float32, k)) for k in (2, 4)]
rtd.allgather_into_tensor_coalesced(outs, ins).wait()
for k, o, i in zip((2, 4), outs, ins):
    ref = on(torch.zeros(k * n))
    dist.all_gather_into_tensor(ref, i.clone(), group=reference)
    same(f"allgather_into_tensor_coalesced x{k}", o, ref)
outs = [on(torch.zeros(k)) for k in (2, 3)]
ins = [on(values(torch.float32, k * n)) for k in (2, 3)]
rtd.reduce_scatter_tensor_coalesced(outs, ins, dist.ReduceScatterOptions()).wait()
for k, o, i in zip((2, 3), outs, ins):
    ref = i.clone()
    dist.all_reduce(ref, group=reference)
    same(f"reduce_scatter_tensor_coalesced x{k}", o, ref[rank * k:(rank + 1) * k])

# Any dtype moves where nothing is added: bool and uint8 broadcast.
flags = on(torch.tensor([rank % 2 == 0, True, False, rank == 0] * 2))
dist.broadcast(flags, src=0)
same("broadcast bool", flags, on(torch.tensor([True, True, False, True] * 2)))
# Reductions of the dtypes librt_dist does not reduce itself (small integers
# and bool in int32), PRODUCT and bitwise ones (by an all-gather), complex
# sums: against the result computed here from every rank's values.
def everyone(dtype, count):
    return [(torch.arange(count, dtype=torch.int64) % 3 + r).to(dtype) for r in range(n)]


for dtype in (torch.uint8, torch.int8, torch.int16, torch.bool):
    for op, fold in ((R.SUM, lambda a, b: a + b), (R.MAX, torch.maximum), (R.MIN, torch.minimum)):
        vals = everyone(dtype, 9)
        t = on(vals[rank].clone())
        dist.all_reduce(t, op=op)
        want = vals[0].to(torch.int64)
        for v in vals[1:]:
            want = fold(want, v.to(torch.int64))
        same(f"all_reduce {dtype} {op}", t, on(want.to(dtype)))
for dtype in (torch.int32, torch.int64, torch.float32):
    vals = everyone(dtype, 6)
    t = on(vals[rank].clone())
    dist.all_reduce(t, op=R.PRODUCT)
    want = vals[0].clone()
    for v in vals[1:]:
        want = want * v
    same(f"all_reduce {dtype} PRODUCT", t, on(want))
for op, fold in ((R.BAND, torch.bitwise_and), (R.BOR, torch.bitwise_or),
                 (R.BXOR, torch.bitwise_xor)):
    vals = everyone(torch.int32, 5)
    t = on(vals[rank].clone())
    dist.all_reduce(t, op=op)
    want = vals[0].clone()
    for v in vals[1:]:
        want = fold(want, v)
    same(f"all_reduce int32 {op}", t, on(want))
c = on(torch.complex(torch.ones(3) * rank, torch.ones(3)))
dist.all_reduce(c)
same("all_reduce complex64", c, on(torch.complex(torch.ones(3) * sum(range(n)), torch.ones(3) * n)))
# A tensor that is not contiguous (a transposed view), reduced in place.
base = on(torch.arange(12, dtype=torch.float32).reshape(3, 4) + rank)
view = base.t()
dist.all_reduce(view)
same("all_reduce of a transposed view", base,
     on(sum(torch.arange(12, dtype=torch.float32).reshape(3, 4) + r for r in range(n))))
# Odd byte counts moved (a pickle's length, as the object collectives send).
odd = on(torch.arange(7, dtype=torch.uint8) + (0 if rank == 0 else 100))
dist.broadcast(odd, src=0)
same("broadcast uint8 x7", odd, on(torch.arange(7, dtype=torch.uint8)))
outs = on(torch.zeros(5 * n, dtype=torch.uint8))
dist.all_gather_into_tensor(outs, on(torch.full((5,), rank, dtype=torch.uint8)))
same("all_gather_into_tensor uint8 x5", outs,
     on(torch.arange(n, dtype=torch.uint8).repeat_interleave(5)))
objs = [None] * n
dist.all_gather_object(objs, {"rank": rank, "pad": "x" * (rank + 1)})
assert [o["rank"] for o in objs] == list(range(n)), objs
checks += 1
if rank == 0:
    dist.send(on(torch.arange(3, dtype=torch.uint8)), dst=1)
elif rank == 1:
    got = on(torch.zeros(3, dtype=torch.uint8))
    dist.recv(got, src=0)
    same("send/recv uint8 x3", got, on(torch.arange(3, dtype=torch.uint8)))
# A reduction no backend of rt_dist runs is refused, naming it.
try:
    dist.all_reduce(on(torch.ones(3, dtype=torch.float8_e4m3fn)))
    raise AssertionError("all_reduce of float8 was not refused")
except (TypeError, RuntimeError) as e:
    assert "Float8" in str(e) or "float8" in str(e), e
    checks += 1

# A sub-group of the even ranks, and reduce/gather/scatter on the world.
evens = dist.new_group([r for r in range(n) if r % 2 == 0], backend="rtd")
if rank % 2 == 0:
    t = on(torch.tensor([float(rank)]))
    dist.all_reduce(t, group=evens)
    same("sub-group all_reduce", t, on(torch.tensor([float(sum(range(0, n, 2)))])))
t = on(values(torch.float32, 4))
dist.reduce(t, dst=0)
ref = on(values(torch.float32, 4))
dist.all_reduce(ref, group=reference)
if rank == 0:
    same("reduce", t, on(ref))
else:
    same("reduce leaves the others", t, on(values(torch.float32, 4)))
dist.barrier()

# torch >= 2.15's gather_single: every rank's tensor into one flat tensor on
# the root (here the last rank), contiguous or not, against the reference's
# list gather.
if hasattr(dist, "gather_single"):
    root = n - 1
    parts = [on(torch.zeros(6)) for _ in range(n)] if rank == root else None
    dist.gather(on(values(torch.float32, 6)), parts, dst=root, group=reference)
    flat = on(torch.zeros(n * 6)) if rank == root else None
    dist.gather_single(on(values(torch.float32, 6)), flat, dst=root)
    strided = on(torch.zeros(6, n)).t() if rank == root else None  # not contiguous
    dist.gather_single(on(values(torch.float32, 6)), strided, dst=root)
    if rank == root:
        same("gather_single", flat, torch.cat(parts))
        same("gather_single into a strided tensor", strided.reshape(-1), torch.cat(parts))
dist.barrier()

# Async work: wait() and the future.
t = on(torch.ones(4))
work = dist.all_reduce(t, async_op=True)
fut = work.get_future()
work.wait()
fut.wait()
same("async all_reduce", t, on(torch.full((4,), float(n))))
chained = dist.all_reduce(on(torch.ones(2)), async_op=True).get_future().then(
    lambda f: f.value()[0] * 2)
same("future then()", chained.wait(), on(torch.full((2,), 2.0 * n)))

# What a Work keeps (no record_stream): after wait() its result alone (the
# output); dropped before its collective is done, its tensors until it is.
# The last rank calls late.
t = on(torch.ones(4))
kept = weakref.ref(t)
work = dist.all_gather_into_tensor(on(torch.zeros(4 * n)), t, async_op=True)
work.wait()
del t
assert kept() is None, "a waited Work still holds its input"
del work
dist.barrier()
if rank == n - 1:
    time.sleep(0.5)
t = on(torch.ones(1 << 12))
kept = weakref.ref(t)
work = dist.all_reduce(t, async_op=True)
del work, t
if rank != n - 1:
    assert kept() is not None, "a Work dropped before its collective was done let its tensor go"
for _ in range(200):  # each call frees the dropped Works that are done
    pending = on(torch.tensor([1.0 if kept() is not None else 0.0]))
    dist.all_reduce(pending)  # every rank makes as many calls
    if device == "cuda":
        torch.cuda.synchronize()
    if pending.item() == 0:
        break
    time.sleep(0.01)
assert kept() is None, "a dropped Work's tensor was kept after it was done"
checks += 2

if IMPL == "python":
    lent_buffers = True
else:  # the C++ backend lends no buffers (yet): docs/torch.md
    lent_buffers = False
# Buffers lent for FSDP2 (rt_dist.torch.fsdp_comms): an all-gather in place
# in a lent output and a reduce-scatter out of a lent input agree with the
# reference; a size's ring lends each buffer once at a time; a call the lent
# set-up cannot run is left to the ordinary path (None).
pg = dist.group.WORLD
dev = torch.device(device, torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
k = 6 if device == "cpu" else 300_000  # on GPUs, buffers under 1 MiB are not lent
for dtype in (torch.float32, torch.bfloat16) if lent_buffers else ():
    held = [pg.lend_shard_buffer("all_gather", k * n, dtype, dev) for _ in range(2)]
    assert all(h is not None for h in held), "a buffer was not lent"
    assert pg.lend_shard_buffer("all_gather", k * n, dtype, dev) is None, "a third buffer lent"
    for out in held:
        mine = out.narrow(0, k * rank, k)
        mine.copy_(on(values(dtype, k, salt=1)))
        pg.shard_collective("all_gather", out, mine).wait()
        ref = on(torch.empty(k * n, dtype=dtype))
        dist.all_gather_into_tensor(ref, on(values(dtype, k, salt=1)), group=reference)
        same(f"lent all_gather {dtype}", out, ref)
    assert pg.shard_collective("all_gather", held[0], on(values(dtype, k))) is None, \
        "an all-gather not in place was taken"
    assert pg.shard_collective("all_gather", on(torch.empty(k * n, dtype=dtype)),
                               on(values(dtype, k))) is None, "a buffer not lent was taken"
    del held, out, mine
    again = pg.lend_shard_buffer("all_gather", k * n, dtype, dev)
    assert again is not None, "a buffer let go was not lent again"
    del again
    grads = pg.lend_shard_buffer("reduce_scatter", k * n, dtype, dev)
    grads.copy_(on(values(dtype, k * n, salt=3)))
    for op in (R.SUM, R.AVG):
        out = on(torch.empty(k, dtype=dtype))
        pg.shard_collective("reduce_scatter", out, grads, op).wait()
        ref = on(torch.empty(k, dtype=dtype))
        dist.reduce_scatter_tensor(ref, on(values(dtype, k * n, salt=3)), op=op, group=reference)
        same(f"lent reduce_scatter {op} {dtype}", out, ref)
    assert pg.shard_collective("reduce_scatter", on(torch.empty(k, dtype=dtype)), grads,
                               R.MAX) is None, "MAX was taken by the lent set-up"
    del grads
if lent_buffers:
    assert pg.lend_shard_buffer("all_gather", k * n * 4, torch.uint8, dev) is None, "uint8 lent"
    assert pg.lend_shard_buffer("all_gather", 0, torch.float32, dev) is None, "nothing was lent"
    assert pg.lend_shard_buffer("reduce_scatter", k * n + 1, torch.float32, dev) is None, \
        "a buffer that does not split over the ranks was lent"
if device == "cuda" and lent_buffers:
    assert pg.lend_shard_buffer("all_gather", 1000, torch.float32, dev) is None, \
        "a buffer under 1 MiB was lent"
    methods = pg._comms["cuda"].slots.methods
    print(f"collectives: lent buffers moved by {sorted(methods)}", flush=True)
if lent_buffers:
    pg.release_shard_buffers()

if IMPL != "python":
    # Each rank's sends and receives with every rank, itself included, the
    # receive posted first (as PyTorch's suite does it).
    sends = [on(values(torch.float32, 5, salt=p)) for p in range(n)]
    recvs = [on(torch.zeros(5)) for _ in range(n)]
    ops = []
    for p in range(n):
        ops += [dist.P2POp(dist.irecv, recvs[p], p), dist.P2POp(dist.isend, sends[p], p)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    for p in range(n):
        sent = (torch.arange(5) % 7 + p * 3 + rank).float()  # values() on rank p, salt=rank
        same(f"batch_isend_irecv from rank {p}", recvs[p], on(sent))
    # A receive from itself of another size than the send: both fail, naming it.
    pending = dist.irecv(on(torch.zeros(4)), rank)
    for half in (lambda: dist.isend(on(torch.zeros(3)), rank), pending.wait):
        try:
            half()
            raise AssertionError("a send to itself of another size was taken")
        except ValueError as e:
            assert "to this rank itself" in str(e), str(e)
    checks += 1
    # A collective and sends and receives in one batch (torch's coalescing
    # manager, as batch_isend_irecv uses it): the batch's Work covers each.
    from torch.distributed.distributed_c10d import _coalescing_manager
    here = torch.device(device, torch.cuda.current_device() if device == "cuda" else None)
    got, before, after = on(torch.full((3,), float(rank))), (rank - 1) % n, (rank + 1) % n
    into = on(torch.zeros(3))
    with _coalescing_manager(group=rtd, device=here, async_ops=True) as cm:
        dist.broadcast(got, 0, async_op=True)  # waited for through the batch
        dist.isend(on(torch.full((3,), float(rank))), after)
        dist.irecv(into, before)
    cm.wait()
    same("broadcast in a batch", got, on(torch.zeros(3)))
    same("a ring of sends in a batch", into, on(torch.full((3,), float(before))))
    # A reduce-scatter of inputs of different sizes (rank r's part: r + 1 elements).
    parts = [on(values(torch.float32, r + 1, salt=r)) for r in range(n)]
    for op in (R.SUM, R.MAX):
        out = on(torch.full((rank + 1,), -1.0))
        dist.reduce_scatter(out, parts, op=op)
        each = [(torch.arange(rank + 1) % 7 + r * 3 + rank).float() for r in range(n)]
        want = sum(each) if op == R.SUM else torch.stack(each).max(0).values
        same(f"reduce_scatter of uneven inputs {op}", out, on(want))
    # torch's profiler sees each call by the backend's name (DDP's own tests count them).
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        dist.all_reduce(on(torch.ones(4)))
        dist.broadcast(on(torch.ones(4)), 0)
    seen = {e.name for e in prof.events()}
    assert {"rtd:all_reduce", "rtd:broadcast"} <= seen, f"the profiler saw {sorted(seen)}"
    checks += 1
if device == "cuda" and IMPL != "python" and torch.cuda.device_count() > 1:
    # Called while another GPU is the current one (a script that never set its
    # own): the group works on its tensors' GPU all the same.
    mine = torch.cuda.current_device()
    t = torch.full((1 << 10,), float(rank + 1), device=f"cuda:{mine}")
    with torch.cuda.device((mine + 1) % torch.cuda.device_count()):
        dist.broadcast(t, 0)
        dist.all_reduce(t)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
    same("calls with another GPU current", t, torch.full((1 << 10,), float(n * n)))

dist.barrier()
if rank == 0:
    print(f"collectives: {checks} checks passed on {n} ranks ({device})", flush=True)
dist.destroy_process_group()
