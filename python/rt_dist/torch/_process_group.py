"""ProcessGroupRTD: a torch.distributed ProcessGroup whose collectives are
librt_dist's, called through its C interface (no compiled code of ours
depends on torch, so any torch with Python process groups can load it).

One communicator per device type, made on the first collective that needs it
(collective: every rank reaches it at the same call): Gloo for CPU tensors,
NCCL for CUDA tensors. Work follows ProcessGroupNCCL's contract: a CUDA
collective is ordered after the caller's current stream, and wait() orders
the current stream after it without blocking the host.
"""

import atexit
import ctypes
import os
import sys
import threading
import weakref

import torch
import torch.distributed as dist

from rt_dist import _codes as C
from rt_dist import _config
from rt_dist.torch import _failure_watch
from rt_dist.torch._comm import _Bucket, _Comm, _capi
from rt_dist.torch._work import _Completer, _Work

_DTYPES = {
    torch.float32: C.FLOAT32,
    torch.float64: C.FLOAT64,
    torch.int32: C.INT32,
    torch.int64: C.INT64,
    torch.bfloat16: C.BFLOAT16,
    torch.float16: C.FLOAT16,
}
# Operations that move bytes without arithmetic carry any dtype, as one of
# the same width (the widest that divides its size).
_CARRIERS = ((4, torch.int32), (2, torch.float16))

_LIVE = weakref.WeakSet()  # process groups to close before the interpreter goes


def _close_all():
    status = _failure_watch.exit_status()
    for pg in list(_LIVE):
        pg._close()
    if status:
        # A collective failed after its call returned and nothing raised it:
        # this process must not end as a success (see _failure_watch).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


atexit.register(_close_all)


def _flag(name, default=None):
    """A 0/1 setting (rt_dist._config's reader; ValueError naming a bad value)."""
    return _config.switch(name, default)


_REDUCE_OPS = {
    int(dist.ReduceOp.RedOpType.SUM): C.SUM,
    int(dist.ReduceOp.RedOpType.AVG): C.AVG,
    int(dist.ReduceOp.RedOpType.MIN): C.MIN,
    int(dist.ReduceOp.RedOpType.MAX): C.MAX,
}


def _reduce_op(op, what):
    # Options hold a ReduceOp, whose .op is its RedOpType; callers may pass
    # either (a RedOpType such as dist.ReduceOp.SUM also passes isinstance(op,
    # dist.ReduceOp), so ask for .op itself). (Hashing pybind's enums costs
    # microseconds: their ints do not.)
    inner = getattr(op, "op", None)
    code = _REDUCE_OPS.get(int(inner.value) if inner is not None else int(op))
    if code is None:
        raise ValueError(f"rtd {what}: the reduction {op} is not one of rt_dist's (SUM, AVG, "
                         "MIN, MAX); for PRODUCT or bitwise ones, use a gloo group for that call")
    return code


def _check_tensor(t, what):
    if not t.is_contiguous():
        raise ValueError(f"rtd {what}: tensors must be contiguous")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"rtd {what}: tensors on {t.device.type} are not supported (cpu, cuda)")


def _dtype(t, what):
    code = _DTYPES.get(t.dtype)
    if code is None:
        raise TypeError(f"rtd {what}: dtype {t.dtype} is not supported; rt_dist reduces "
                        "float32, float64, int32, int64, bfloat16 and float16")
    return code


def _carried(t, what):
    """(tensor viewed as a dtype rt_dist carries, its code), for byte-moving operations."""
    if t.dtype in _DTYPES:
        return t, _DTYPES[t.dtype]
    nbytes = t.numel() * t.element_size()
    for width, dtype in _CARRIERS:
        if nbytes % width == 0 and t.numel() > 0:
            v = t.reshape(-1).view(torch.uint8).view(dtype)
            return v, _DTYPES[dtype]
    raise TypeError(f"rtd {what}: dtype {t.dtype} with {t.numel()} elements cannot be carried "
                    "(rt_dist moves float32, float64, int32, int64, bfloat16 and float16)")


class _BackendInfo:
    """What torch reads of a group's per-device backend."""

    supports_splitting = False

    def name(self):
        return "rtd"


class ProcessGroupRTD(dist.ProcessGroup):
    """torch.distributed's ProcessGroup over librt_dist (backend name "rtd")."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._store = store
        self._timeout_ms = max(1, int(timeout.total_seconds() * 1000)) if timeout else 1800000
        self._copy_engines = _flag("RTD_TORCH_COPY_ENGINES", "1")
        self._label = f"rtd group of {size}"
        self._comms = {}
        self._futures = None
        self.calls = 0  # operations launched (for tests)
        self._lock = threading.Lock()
        _LIVE.add(self)

    # -- what torch asks of every process group --------------------------------

    def getBackendName(self):
        return "rtd"

    def _get_backend_name(self):
        return "rtd"

    def name(self):
        return "rtd"

    # The name torch gives the group (C++ keeps it in a backend, which a
    # Python process group does not have).
    def _set_group_name(self, name):
        self._group_name = name

    @property
    def group_name(self):
        return getattr(self, "_group_name", "")

    def _set_group_desc(self, desc):
        self._group_desc = desc

    @property
    def group_desc(self):
        return getattr(self, "_group_desc", "")

    def _get_backend(self, device):
        # torch asks a group made with device_id whether its backend splits
        # communicators (ncclCommSplit); this one makes each afresh.
        return _BackendInfo()

    def shutdown(self):
        self._close()

    def abort(self):
        for comm in list(self._comms.values()):
            with comm.lock:
                comm.seen = True  # the caller knows: nothing to raise in its thread
                if comm.handle:
                    comm.lib.rtd_comm_abort(comm.handle)

    def _close(self):
        with self._lock:
            comms, self._comms = list(self._comms.values()), {}
        for comm in comms:
            comm.close()

    # -- plumbing ---------------------------------------------------------------

    def _error(self, what, err):
        msg = f"rtd {what} on rank {self.rank()} of {self.size()}: {err}"
        if getattr(err, "category", "") == "timeout":
            return TimeoutError(msg)
        if getattr(err, "category", "") == "invalid argument":
            return ValueError(msg)
        return RuntimeError(msg)

    def _completer(self):
        if self._futures is None:
            self._futures = _Completer()
        return self._futures

    def _comm(self, device):
        key = device.type
        if key not in ("cpu", "cuda"):
            raise ValueError(f"rtd: tensors on {key} are not supported (cpu, cuda)")
        comm = self._comms.get(key)
        if comm is None:
            comm = _Comm(self, device)
            self._comms[key] = comm
        elif comm.cuda and device.index != comm.device:
            raise ValueError(f"rtd: this group runs on cuda:{comm.device}, a tensor is on "
                             f"{device}; one GPU per rank")
        return comm

    def _launch(self, what, tensors, result, call, after=None):
        """Runs call(comm, stream) for tensors' device and returns its Work."""
        for t in tensors:
            _check_tensor(t, what)
        device = tensors[0].device if tensors else torch.device("cpu")
        if any(t.device != device for t in tensors):
            raise ValueError(f"rtd {what}: every tensor must be on one device")
        comm = self._comm(device)
        return self._work(comm, call(comm, comm.stream()), what, tensors, result, after)

    def _work(self, comm, handle, what, tensors, result, after=None):
        """The Work of an operation just launched (handle NULL: it failed)."""
        self.calls += 1
        if not handle:
            raise comm.failed(self, what)
        if comm.unwaited:
            comm.reap()
        return _Work(self, comm, handle, what, tensors, result, after)

    # -- collectives --------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if len(tensors) != 1:
            return self.allreduce_coalesced(tensors, opts)
        op = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "allreduce")
        t = tensors[0]
        dt = _DTYPES.get(t.dtype)
        if dt is None or not t.is_contiguous():
            dt = _dtype(t, "allreduce")
            _check_tensor(t, "allreduce")
        comm = self._comms.get("cuda" if t.is_cuda else "cpu" if t.is_cpu else None)
        if comm is None or (comm.cuda and t.get_device() != comm.device):
            return self._launch("allreduce", [t], [t], lambda c, s: c.lib.rtd_all_reduce(
                c.handle, t.data_ptr(), t.data_ptr(), t.numel(), dt, op, c.device, s))
        # The common case, kept short: one contiguous tensor on a known device.
        ptr = t.data_ptr()
        handle = comm.lib.rtd_all_reduce(comm.handle, ptr, ptr, t.numel(), dt, op, comm.device,
                                         comm.stream())
        return self._work(comm, handle, "allreduce", [t], tensors)

    def bucket_allreduce(self, index, t, copy_engines=None, owner=None):
        """The average of DDP bucket `index` (its flat buffer t), in place.

        Collective. Each bucket is set up once (the peers map it, and on one
        host copy engines move its data with no staging copy;
        RTD_TORCH_COPY_ENGINES=0, or copy_engines=False for this bucket:
        NCCL's all_reduce, through the same call), and again whenever every
        rank must: the set-up is collective, so what decides it must be alike
        on every rank. owner: (model, generation), numbers alike on every
        rank (see rt_dist.torch.ddp_hook), that change when a new DDP model
        takes the index or DDP rebuilds its buckets; the buffer's address, a
        rank's own, only where no owner is given (ddp_hook called by a
        script's own hook). A buffer that moved while its owner stayed is
        refused, naming it (never a set-up on one rank alone).
        """
        _check_tensor(t, "allreduce (DDP bucket)")
        dt = _dtype(t, "allreduce (DDP bucket)")
        comm = self._comm(t.device)
        engines = self._copy_engines if copy_engines is None else bool(copy_engines)
        key = (t.data_ptr() if owner is None else tuple(owner), t.numel(), t.dtype, engines)
        bucket = comm.buckets.get(index)
        if bucket is not None and bucket.key == key and bucket.ptr != t.data_ptr():
            raise RuntimeError(f"rtd allreduce (DDP bucket {index}) on rank {self.rank()}: "
                               "the bucket's memory moved while DDP did not rebuild its buckets; "
                               "the peers map the old memory")
        if bucket is None or bucket.key != key:
            if bucket is not None:
                bucket.free()
                del comm.buckets[index]
            handle = comm.lib.rtd_persistent_all_reduce(
                comm.handle, t.data_ptr(), t.numel(), dt, C.AVG, comm.device,
                1 if engines else 0)
            if not handle:
                raise comm.failed(self, "allreduce (DDP bucket set-up)")
            bucket = comm.buckets[index] = _Bucket(comm, t, handle, key)
        handle = comm.lib.rtd_persistent_run(bucket.handle, comm.stream())
        return self._work(comm, handle, "allreduce (DDP bucket)", [t], [t])

    def lend_shard_buffer(self, kind, numel, dtype, device, reclaim=None):
        """A buffer of this group's that its peers map once, for an all-gather's
        output ("all_gather") or a reduce-scatter's input ("reduce_scatter")
        of numel elements; None when none is free (see _shard_slots, also for
        reclaim). Every rank must ask for the same in the same order. See
        fsdp_comms."""
        if numel <= 0 or dtype not in _DTYPES or device.type not in ("cpu", "cuda"):
            return None
        if numel % self.size():
            return None  # not size equal blocks: no collective of this group's
        return self._comm(device).slots.lend(kind, numel, dtype, reclaim)

    def release_shard_buffers(self):
        """Lets go of every buffer lent for FSDP2 and its set-up (once the model
        that used them is gone; the next lend sets up afresh). Every rank."""
        for comm in self._comms.values():
            comm.slots.free()

    def park_shard_buffers(self):
        """Gives the idle buffers lent for FSDP2 back to torch's allocator
        until their next lend (see _shard_slots). Every rank, at the same
        point of every step (where FSDP2 let go of them: the end of the
        root's forward and of the backward)."""
        for comm in self._comms.values():
            comm.slots.park()

    def shard_collective(self, kind, output, input, op=None):
        """all_gather_into_tensor ("all_gather", in place in a lent output) or
        reduce_scatter_tensor ("reduce_scatter", out of a lent input) through
        the lent buffer's persistent set-up: no staging copy. None when the
        buffer is not one lent whole, or the call is not one it can run (the
        caller then makes the ordinary call)."""
        gather = kind == "all_gather"
        comm = self._comms.get(output.device.type)
        big, small = (output, input) if gather else (input, output)
        slot = comm.slots.find(kind, big) if comm is not None else None
        if (slot is None or small.dtype != big.dtype or not small.is_contiguous()
                or small.numel() * self.size() != big.numel()):
            return None
        if gather:
            key = None
            offset = self.rank() * small.numel() * small.element_size()
            if small.data_ptr() != big.data_ptr() + offset:
                return None  # not in place
        else:
            key = _reduce_op(op if op is not None else dist.ReduceOp.SUM, "reduce_scatter_tensor")
            if key not in (C.SUM, C.AVG):
                return None
        what = "all_gather_into_tensor (FSDP2)" if gather else "reduce_scatter_tensor (FSDP2)"
        h = comm.slots.handle(slot, kind, key, _DTYPES[big.dtype],
                              lambda: comm.failed(self, what + ", set-up"))
        handle = comm.lib.rtd_persistent_shard_run(h, input.data_ptr(), output.data_ptr(),
                                                   small.numel(), comm.stream())
        comm.slots.stats[kind] += 1
        return self._work(comm, handle, what, [output, input], output)

    def _gatherer(self, buffer):
        """(comm, persistent all-gather) of a lent all-gather buffer, set up
        at its first use, when it can land blocks elsewhere; else None."""
        comm = self._comms.get(buffer.device.type)
        slot = comm.slots.find("all_gather", buffer) if comm is not None else None
        if slot is None:
            return None
        h = comm.slots.handle(slot, "all_gather", None, _DTYPES[buffer.dtype],
                              lambda: comm.failed(self, "all_gather_into_tensor (FSDP2), set-up"))
        return (comm, h) if comm.lib.rtd_persistent_gathers_blocks(h) else None

    def can_gather_blocks(self, buffer):
        """Whether gather_blocks can land this lent buffer's blocks (the same
        answer on every rank: collective, at its first call for a buffer)."""
        return self._gatherer(buffer) is not None

    def gather_blocks(self, buffer, outputs):
        """All-gathers each rank's block of a lent all-gather buffer (its own
        block written there, as shard_collective's input) into outputs
        instead of the buffer: the block is the outputs' shares end to end
        (output.numel() // size() elements each), rank p's share landing in
        the p-th part of its output (contiguous, of the buffer's dtype and
        device; librt_dist checks the counts). None when buffer is not one
        lent whole or its set-up cannot (then the caller gathers in place).
        Every rank, the same shapes."""
        what = "all_gather_into_tensor (FSDP2, into its parameters)"
        if not outputs:
            raise ValueError(f"rtd {what}: no outputs")
        for o in outputs:
            _check_tensor(o, what)
            if o.dtype != buffer.dtype or o.device != buffer.device:
                raise ValueError(f"rtd {what}: an output is {o.dtype} on {o.device}, the "
                                 f"buffer {buffer.dtype} on {buffer.device}")
        found = self._gatherer(buffer)
        if found is None:
            return None
        comm, h = found
        ptrs = (ctypes.c_void_p * len(outputs))(*[o.data_ptr() for o in outputs])
        counts = (ctypes.c_int64 * len(outputs))(*[o.numel() for o in outputs])
        handle = comm.lib.rtd_persistent_gather_blocks(h, ptrs, counts, len(outputs),
                                                       comm.stream())
        comm.slots.stats["landed"] += 1
        return self._work(comm, handle, what, [buffer, *outputs], outputs[0])

    def allreduce_coalesced(self, tensors, opts=None):
        op = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                        "allreduce_coalesced")
        ops = [(C.OP_ALL_REDUCE, t, t, t.numel(), _dtype(t, "allreduce_coalesced"), op, 0)
               for t in tensors]
        return self._group("allreduce_coalesced", tensors, list(tensors), ops)

    def _group(self, what, tensors, result, ops, after=None):
        c = _capi()

        def call(comm, stream):
            arr = (c.Op * len(ops))()
            for i, (kind, a, b, count, dtype, op, peer) in enumerate(ops):
                arr[i] = c.Op(kind, a.data_ptr() if a is not None else None,
                              b.data_ptr() if b is not None else None, count, dtype, op, peer)
            return comm.lib.rtd_group(comm.handle, arr, len(ops), comm.device, stream)

        return self._launch(what, tensors, result, call, after)

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        root = opts.rootRank if opts is not None else 0
        if len(tensors) != 1:
            raise ValueError("rtd broadcast: one tensor per call")
        t = tensors[0]
        v, dt = _carried(t, "broadcast")
        return self._launch("broadcast", [t], [t], lambda c, s: c.lib.rtd_broadcast(
            c.handle, v.data_ptr(), v.numel(), dt, root, c.device, s))

    def _allgather_base(self, output, input, opts=None):
        if output.numel() != input.numel() * self.size():
            raise ValueError(f"rtd all_gather_into_tensor: output has {output.numel()} elements, "
                             f"not {self.size()} x {input.numel()}")
        if output.dtype != input.dtype:
            raise TypeError("rtd all_gather_into_tensor: input and output dtypes differ")
        return self._move("all_gather_into_tensor", output, input, "rtd_all_gather")

    def _move(self, what, output, input, c_call):
        """A collective that moves input's bytes into output (any dtype they carry)."""
        vi, dt = _carried(input, what)
        vo, _ = _carried(output, what)
        return self._launch(what, [output, input], output, lambda c, s: getattr(c.lib, c_call)(
            c.handle, vi.data_ptr(), vo.data_ptr(), vi.numel(), dt, c.device, s))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        ops = []
        for o, i in zip(outputs, inputs, strict=True):
            vi, dt = _carried(i, "all_gather_into_tensor_coalesced")
            vo, _ = _carried(o, "all_gather_into_tensor_coalesced")
            if vo.numel() != vi.numel() * self.size():
                raise ValueError("rtd all_gather_into_tensor_coalesced: an output is not "
                                 "size x its input")
            ops.append((C.OP_ALL_GATHER, vi, vo, vi.numel(), dt, 0, 0))
        return self._group("all_gather_into_tensor_coalesced", list(outputs) + list(inputs),
                           list(outputs), ops)

    def allgather(self, output_tensors, input_tensors, opts=None):
        if isinstance(input_tensors, torch.Tensor):
            output_tensors, input_tensors = [output_tensors], [input_tensors]
        if len(input_tensors) != 1 or len(output_tensors) != 1:
            raise ValueError("rtd allgather: one input tensor per call")
        t, outs = input_tensors[0], output_tensors[0]
        if len(outs) != self.size() or any(o.numel() != t.numel() for o in outs):
            raise ValueError(f"rtd allgather: {self.size()} outputs of {t.numel()} elements each "
                             "are needed")
        flat = torch.empty((self.size() * t.numel(),), dtype=t.dtype, device=t.device)
        work = self._allgather_base(flat, t.reshape(-1))

        def scatter_out():
            for o, piece in zip(outs, flat.chunk(self.size()), strict=True):
                o.copy_(piece.view_as(o))

        work._after = scatter_out
        work._result = output_tensors
        work._tensors = [flat, t] + list(outs)
        return work

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                        "reduce_scatter_tensor")
        if input.numel() != output.numel() * self.size():
            raise ValueError(f"rtd reduce_scatter_tensor: input has {input.numel()} elements, "
                             f"not {self.size()} x {output.numel()}")
        dt = _dtype(input, "reduce_scatter_tensor")
        if output.dtype != input.dtype:
            raise TypeError("rtd reduce_scatter_tensor: input and output dtypes differ")
        return self._launch("reduce_scatter_tensor", [output, input], output,
                            lambda c, s: c.lib.rtd_reduce_scatter(
                                c.handle, input.data_ptr(), output.data_ptr(), output.numel(), dt,
                                op, c.device, s))

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        op = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                        "reduce_scatter_tensor_coalesced")
        ops = []
        for o, i in zip(outputs, inputs, strict=True):
            if i.numel() != o.numel() * self.size():
                raise ValueError("rtd reduce_scatter_tensor_coalesced: an input is not size x "
                                 "its output")
            ops.append((C.OP_REDUCE_SCATTER, i, o, o.numel(),
                        _dtype(i, "reduce_scatter_tensor_coalesced"), op, 0))
        return self._group("reduce_scatter_tensor_coalesced", list(outputs) + list(inputs),
                           list(outputs), ops)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        if isinstance(output_tensors, torch.Tensor):
            output_tensors, input_tensors = [output_tensors], [input_tensors]
        out, ins = output_tensors[0], input_tensors[0]
        flat = torch.cat([i.reshape(-1) for i in ins])
        return self._reduce_scatter_base(out.view(-1), flat, opts)

    def reduce(self, tensors, opts=None):
        t = tensors[0] if not isinstance(tensors, torch.Tensor) else tensors
        root = opts.rootRank if opts is not None else 0
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        # Only the root's tensor changes: the others reduce a copy.
        target = t if self.rank() == root else t.clone()
        o = dist.AllreduceOptions()
        o.reduceOp = op
        work = self.allreduce([target], o)
        work._result = [t]
        return work

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        n = self.size()
        if not output_split_sizes and not input_split_sizes:
            if input.numel() % n or output.numel() != input.numel():
                raise ValueError(f"rtd all_to_all_single: {input.numel()} elements do not "
                                 f"split evenly over {n} ranks")
            return self._move("all_to_all_single", output, input, "rtd_all_to_all")
        ins = self._split(input, input_split_sizes, "input")
        outs = self._split(output, output_split_sizes, "output")
        return self._exchange("all_to_all_single", ins, outs, [output, input], output)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        return self._exchange("all_to_all", list(input_tensors), list(output_tensors),
                              list(output_tensors) + list(input_tensors), output_tensors)

    def _split(self, t, sizes, which):
        n = self.size()
        rows = t.shape[0] if t.dim() else 1
        if not sizes:
            if rows % n:
                raise ValueError(f"rtd all_to_all_single: {which} of {rows} rows does not split "
                                 f"over {n} ranks")
            sizes = [rows // n] * n
        if len(sizes) != n or sum(sizes) != rows:
            raise ValueError(f"rtd all_to_all_single: {which} split sizes {list(sizes)} do not "
                             f"cover {rows} rows over {n} ranks")
        return list(t.split(list(sizes)))

    def _exchange(self, what, ins, outs, tensors, result):
        """Sends ins[j] to rank j and receives outs[j] from it, as one group."""
        me = self.rank()
        ops = []
        staged = []
        for j in range(self.size()):
            if j == me:
                continue
            vi, dt = _carried(ins[j].contiguous(), what)
            o = outs[j]
            oc = o if o.is_contiguous() else torch.empty_like(o)
            vo, _ = _carried(oc, what)
            if oc is not o:
                staged.append((o, oc))
            if vi.numel():
                ops.append((C.OP_SEND, vi, None, vi.numel(), dt, 0, j))
            if vo.numel():
                ops.append((C.OP_RECV, None, vo, vo.numel(), dt, 0, j))
            tensors = tensors + [vi, vo]
        outs[me].copy_(ins[me])

        def copy_back():
            for o, oc in staged:
                o.copy_(oc)

        if not ops:
            return self.barrier()
        return self._group(what, tensors, result, ops, copy_back if staged else None)

    def send(self, tensors, dst, tag=0):
        t = tensors[0]
        v, dt = _carried(t, "send")
        return self._launch("send", [t], [t], lambda c, s: c.lib.rtd_send(
            c.handle, v.data_ptr(), v.numel(), dt, dst, tag, c.device, s))

    def recv(self, tensors, src, tag=0):
        t = tensors[0]
        v, dt = _carried(t, "recv")
        return self._launch("recv", [t], [t], lambda c, s: c.lib.rtd_recv(
            c.handle, v.data_ptr(), v.numel(), dt, src, tag, c.device, s))

    def recv_anysource(self, tensors, tag=0):
        raise NotImplementedError("rtd: receiving from any source is not supported; name the "
                                  "sender")

    def gather(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        t = input_tensors[0]
        outs = output_tensors[0] if self.rank() == root else [
            torch.empty_like(t) for _ in range(self.size())]
        return self.allgather([outs], [t])

    def scatter(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        out = output_tensors[0]
        if self.rank() == root:
            flat = torch.cat([i.reshape(-1) for i in input_tensors[0]])
        else:
            flat = torch.empty((self.size() * out.numel(),), dtype=out.dtype, device=out.device)
        o = dist.BroadcastOptions()
        o.rootRank = root
        work = self.broadcast([flat], o)
        me = self.rank()

        def take():
            out.copy_(flat[me * out.numel():(me + 1) * out.numel()].view_as(out))

        if work._comm.cuda:
            work.wait()
            take()
        else:
            work._after = take
        work._result = [out]
        return work

    def barrier(self, opts=None):
        # On the CPU communicator: the host waits for every rank, as a barrier must.
        zero = torch.zeros(1)
        return self._launch("barrier", [zero], None,
                            lambda c, s: c.lib.rtd_barrier(c.handle, None))
