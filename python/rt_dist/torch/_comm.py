"""One librt_dist communicator of a ProcessGroupRTD (_Comm), the store
callbacks through which librt_dist reaches torch's store (_StoreBridge), and
a DDP bucket set up once (_Bucket)."""

import ctypes
import threading
import warnings
from collections import deque
from datetime import timedelta

import torch
import torch.distributed as dist

from rt_dist.torch import _failure_watch
from rt_dist.torch._shard_slots import ShardSlots


def _capi():
    from rt_dist import _capi  # loads librt_dist: only once a group is made

    return _capi

class _StoreBridge:
    """The callbacks through which librt_dist uses torch's store."""

    def __init__(self, store):
        c = _capi()
        self._store = store
        self._lib = c.lib
        self._closed = False
        # The ctypes callbacks must live as long as the communicator.
        self._fns = (c.SET(self._set), c.GET(self._get), c.ADD(self._add), c.CHECK(self._check),
                     c.REMOVE(self._remove))
        self.ops = c.StoreOps(None, *self._fns)

    def close(self):
        self._closed = True

    def _guard(self, f):
        if self._closed:
            return 1
        try:
            f()
            return 0
        except Exception:  # the C side turns a nonzero answer into an error naming the key
            return 1

    def _set(self, _self, key, value, size):
        return self._guard(lambda: self._store.set(key.decode(), ctypes_bytes(value, size)))

    def _get(self, _self, key, timeout_ms, reply):
        def get():
            k = key.decode()
            if timeout_ms > 0:
                self._store.wait([k], timedelta(milliseconds=timeout_ms))
            value = self._store.get(k)
            self._lib.rtd_store_reply(reply, value, len(value))

        return self._guard(get)

    def _add(self, _self, key, delta, result):
        def add():
            result[0] = self._store.add(key.decode(), delta)

        return self._guard(add)

    def _check(self, _self, key, exists):
        def check():
            exists[0] = 1 if self._store.check([key.decode()]) else 0

        return self._guard(check)

    def _remove(self, _self, key):
        return self._guard(lambda: self._store.delete_key(key.decode()))


def ctypes_bytes(ptr, size):
    return ctypes.string_at(ptr, size) if size else b""


class _Comm:
    """One librt_dist communicator and what its calls need."""

    def __init__(self, pg, device):
        c = _capi()
        self.lib = c.lib
        self.cuda = device.type == "cuda"
        self.device = device.index if self.cuda else -1
        self.bridge = _StoreBridge(dist.PrefixStore(f"rtd/{device.type}/", pg._store))
        name = f"{pg._label} {device.type}"
        handle = self.lib.rtd_comm_create(
            self.bridge.ops, b"nccl" if self.cuda else b"gloo", name.encode(), pg.rank(),
            pg.size(), self.device, None, pg._timeout_ms, 1 if pg._copy_engines else 0)
        if not handle:
            raise pg._error("init", c.last_error())
        self.handle = handle
        self.who = f"{name} on rank {pg.rank()} of {pg.size()}"
        self.rank, self.size, self.timeout_ms = pg.rank(), pg.size(), pg._timeout_ms
        self.store = dist.PrefixStore(f"rtd/{device.type}/agree/", pg._store)  # any_rank
        self.rounds = 0
        self.lock = threading.Lock()  # the handle against close() while the watch reads it
        self.failure_fn = None  # what librt_dist calls when the communicator fails (on_failure)
        self.seen = False  # a failure of this communicator was raised to a caller
        self.buckets = {}  # DDP bucket index -> _Bucket (bucket_allreduce)
        self.slots = ShardSlots(self, pg._copy_engines)  # FSDP2's buffers (fsdp_comms)
        self.side = torch.cuda.Stream(device) if self.cuda else None
        # The tensors an operation uses are kept by its Work until a wait()
        # has ordered the caller's stream after it (then the caching
        # allocator may hand their blocks out again on that stream), or, for
        # a Work dropped before that, here until the operation is done: as
        # ProcessGroupNCCL keeps them (no record_stream, whose frees wait for
        # whatever a stream has queued by then, and which let blocks pile up
        # while the host runs steps ahead: 31 GiB reserved against nccl's 8
        # for FSDP2).
        self.unwaited = deque()  # (work handle, tensors)
        if self.cuda:
            _failure_watch.watch(self)
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if not self.cuda:
            self.stream = lambda: None
        elif raw is not None:
            index = self.device
            self.stream = lambda: raw(index)
        else:
            self.stream = lambda: torch.cuda.current_stream(device).cuda_stream

    def any_rank(self, flag, what):
        """Collective, through the store: whether flag is true on any rank.
        A rank that does not come within the group's timeout is named."""
        self.rounds += 1
        keys = [f"{self.rounds}/{r}" for r in range(self.size)]
        self.store.set(keys[self.rank], b"1" if flag else b"0")
        try:
            self.store.wait(keys, timedelta(milliseconds=self.timeout_ms))
        except Exception as e:  # torch's DistStoreError: the store timed out
            missing = [r for r, k in enumerate(keys) if not self.store.check([k])]
            raise TimeoutError(
                f"rtd {what} on rank {self.rank} of {self.size}: rank(s) {missing} did not "
                f"answer within {self.timeout_ms} ms (every rank must run the same FSDP2 "
                "steps; see docs/torch.md)") from e
        multi_get = getattr(self.store, "multi_get", None)  # torch 2.4 lacks it
        answers = multi_get(keys) if multi_get else [self.store.get(k) for k in keys]
        if self.rounds > 2:  # every rank has read that round's answers: it passed the last
            self.store.delete_key(f"{self.rounds - 2}/{self.rank}")
        return any(a == b"1" for a in answers)

    def failed(self, pg, what):
        """The exception of a call that failed (its message in rtd_last_error())."""
        error = pg._error(what, _capi().last_error())
        self.seen = True
        return error

    def unseen_failure(self):
        """Why this communicator failed, once, if no call raised it yet; else None."""
        with self.lock:
            if self.seen or not self.handle or not self.lib.rtd_comm_failed(self.handle):
                return None
            self.seen = True
            return f"{self.who}: {_capi().last_error()}"

    def on_failure(self, listener):
        """Has librt_dist call listener() once, on its own thread, when this
        communicator fails; None: no more calls (returns after a running one)."""
        c = _capi()
        fn = c.FAILURE_FN(lambda _arg: listener()) if listener else None
        if self.handle:  # not under self.lock: listener takes it (unseen_failure)
            self.lib.rtd_comm_on_failure(self.handle, ctypes.cast(fn, ctypes.c_void_p) if fn
                                         else None, None)
        self.failure_fn = fn  # alive while librt_dist may call it

    def keep_until_done(self, work, tensors):
        """A Work dropped before its operation was waited for: its tensors
        stay alive until the operation is done (reap), then it is freed."""
        self.unwaited.append((work, tensors))

    def reap(self):
        """Frees the dropped Works whose operations are done, oldest first."""
        with self.lock:
            q = self.unwaited
            while q and self.lib.rtd_work_done(q[0][0]):
                self.lib.rtd_work_free(q.popleft()[0])

    def close(self):
        buckets, self.buckets = list(self.buckets.values()), {}
        for bucket in buckets:  # before the communicator they belong to
            bucket.free()
        self.slots.free()
        in_flight = sum(1 for work, _ in self.unwaited if not self.lib.rtd_work_done(work))
        if in_flight:  # cut short below: say so, or their results would be lost unseen
            warnings.warn(f"{self.who}: destroyed with {in_flight} collective(s) in flight "
                          "whose Works were dropped unwaited; they are cut short, and their "
                          "tensors may hold partial results (wait() on a collective's Work "
                          "before destroying its group)", RuntimeWarning, stacklevel=2)
        self.on_failure(None)
        with self.lock:
            handle, self.handle = self.handle, None
        if handle:
            self.lib.rtd_comm_destroy(handle)  # waits for (or aborts) what is in flight
        while self.unwaited:
            self.lib.rtd_work_free(self.unwaited.popleft()[0])
        self.bridge.close()


class _Bucket:
    """A DDP bucket's persistent all-reduce: the tensor it was set up for."""

    def __init__(self, comm, t, handle, key):
        self.lib = comm.lib
        self.handle = handle
        self.key = key  # what decides a new set-up (see bucket_allreduce)
        self.ptr = t.data_ptr()
        self.method = comm.lib.rtd_persistent_method(handle).decode()

    def free(self):
        if self.handle:
            self.lib.rtd_persistent_free(self.handle)
            self.handle = None
