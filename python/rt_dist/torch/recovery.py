"""In-process recovery of PyTorch jobs (``dtrun --recovery=in-process``).

A DDP script that survives ``kill -9`` of a worker: the survivors keep their
processes (and CUDA contexts), their process group is rebuilt in a new
generation, and the worker dtrun starts in the lost one's place receives the
model, the optimizer's state and the step count from a survivor over the new
group, from memory::

    job = recovery.Job([model, optimizer])   # init_process_group("rtd") on dtrun's store
    step = job.resume(0)                     # a replacement: a survivor's state and step
    ddp = DDP(model)                         # after resume: DDP's own broadcast comes second
    while step < steps:
        try:
            loss(ddp, step).backward()
            job.check()                      # this step's collectives all done, none failed
            optimizer.step()
            step += 1
        except Exception as e:
            ddp = None                       # let the old DDP go with its group
            step = job.recover(e, step)      # raises e when the job cannot go on
            ddp = DDP(model)

The step in flight when a worker died is discarded on every rank alike: the
loss curve goes on from the last step the lowest-ranked survivor completed.
``check()`` between backward and the optimizer's step is what makes that
true on GPUs: a collective cut short by the abort ends its kernels, and the
work queued after it would then update the weights from a partial
gradient while the host counted the step as done.
The same protocol as librt_dist's ``rtd::Recovery`` (runtime/recovery.cc),
through the job's store (dtrun's: torch's TCPStore lives in rank 0's process
and dies with it). docs/torch.md says what it covers and what not.
"""

from __future__ import annotations

import atexit
import datetime
import logging
import threading
import time
import traceback
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["Job", "receives_state"]

_log = logging.getLogger("rt_dist.recovery")

_GENERATION_KEY = "recovery/generation"  # dtrun adds one before it starts a replacement
_POLL_S = 0.05
_WATCH_SLICE = datetime.timedelta(seconds=0.5)


def _end_key(generation: int) -> str:
    return f"recovery/end/{generation}"


class _Meta:
    """A tensor of an optimizer's state, described for the ranks that have none."""

    def __init__(self, t: torch.Tensor) -> None:
        self.shape, self.dtype, self.device = tuple(t.shape), t.dtype, t.device.type


def _describe(obj: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return _Meta(obj)
    if isinstance(obj, dict):
        return {k: _describe(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_describe(v, tensors) for v in obj)
    return obj


def _build(obj: Any, tensors: list[torch.Tensor], device: torch.device) -> Any:
    if isinstance(obj, _Meta):
        where = device if obj.device != "cpu" else torch.device("cpu")
        t = torch.empty(obj.shape, dtype=obj.dtype, device=where)
        tensors.append(t)
        return t
    if isinstance(obj, dict):
        return {k: _build(v, tensors, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_build(v, tensors, device) for v in obj)
    return obj


def receives_state() -> bool:
    """Whether this worker will receive its modules' and optimizers' state
    from a survivor (a replacement, or a worker of a node that joins): it
    may then build its model on the meta device and ``to_empty`` it onto
    its own, skipping an initialization whose values ``resume`` overwrites
    (on a large model most of a replacement's start). False outside
    ``dtrun --recovery=in-process``."""
    from rt_dist.torch import _extension

    info = _extension().job_info()
    return bool(info["recovery"]) and _starts_without_state(info)


def _starts_without_state(info: dict) -> bool:
    """A replacement (a later generation) or a joining node's worker."""
    return info["generation"] > 0 or bool(info["joining"])


class Job:
    """A worker's part in a job that recovers in process.

    ``state``: the modules and optimizers whose state every rank holds alike
    (DDP's: not FSDP2's shards, which exist on one rank only). Creates the
    default process group (``backend``, rank and world size from dtrun) on
    the job's store, under this generation. Outside ``dtrun
    --recovery=in-process`` it is a plain ``init_process_group(backend)``
    and ``recover`` raises what it is given.
    """

    def __init__(self, state: Iterable[torch.nn.Module | torch.optim.Optimizer],
                 backend: str = "rtd", timeout: datetime.timedelta | None = None) -> None:
        if backend != "rtd":
            raise ValueError(f"rt_dist.torch.recovery: backend {backend!r}: in-process recovery "
                             "rebuilds rtd groups only (init_process_group('rtd'))")
        self._state = list(state)
        for s in self._state:
            if not isinstance(s, (torch.nn.Module, torch.optim.Optimizer)):
                raise TypeError("rt_dist.torch.recovery: state holds modules and optimizers, "
                                f"not {type(s).__name__}")
        from rt_dist.torch import _extension

        self._C = _extension()
        info = self._C.job_info()
        self.enabled: bool = info["recovery"]
        self.rank: int = info["rank"]
        self.world_size: int = info["world_size"]
        self.generation: int = info["generation"]
        self._wait_s: float = info["recovery_wait_s"]
        self._timeout = timeout or datetime.timedelta(seconds=info["timeout_s"])
        # A replacement, a joining node's worker, or a worker of a later round
        # agree on the state before their first step; the first two have none.
        self.replacement: bool = self.generation > 0 or (self.enabled and info["round"] > 0)
        self._has_state = not _starts_without_state(info)
        self._watch_lock = threading.Lock()
        self._watched = -1  # the generation the watch aborts on; -1: disarmed
        self._aborted = -1  # the generation the watch aborted
        self._watch_store = None
        self._store = None
        self._backends: list = []  # the group's rtd backends, whose failures check() raises
        if not self.enabled:
            dist.init_process_group(backend, timeout=self._timeout)
            self._backends = self._find_backends()
            return
        self._store = self._C.JobStore(self._timeout)
        self._open_group()
        self._watch_store = self._C.JobStore(self._timeout)
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="rtd-recovery-watch",
                                         daemon=True)
        self._watcher.start()
        # Ended before the interpreter's finalization: a daemon thread that
        # comes back from the store then would be ended inside C++ frames.
        atexit.register(self.close)
        self._enable()

    def close(self) -> None:
        """Stops the watch (at the latest at the interpreter's exit)."""
        if self._watch_store is None or self._stopping.is_set():
            return
        self._stopping.set()
        self._watcher.join()

    # The group of one generation, on the job's store under its prefix.
    def _open_group(self) -> None:
        store = dist.PrefixStore(f"gen{self.generation}/torch/", self._store)
        dist.init_process_group("rtd", store=store, rank=self.rank, world_size=self.world_size,
                                timeout=self._timeout)
        self._backends = self._find_backends()

    @staticmethod
    def _find_backends() -> list:
        """The default group's rtd backends (one object serves CPU and CUDA)."""
        group = dist.distributed_c10d._get_default_group()
        found = []
        for device in ("cpu", "cuda"):
            try:
                backend = group._get_backend(torch.device(device))
            except RuntimeError:
                continue  # the group has no backend for that device
            if hasattr(backend, "check") and all(backend is not b for b in found):
                found.append(backend)
        return found

    @staticmethod
    def _abort_group() -> None:
        try:
            dist.distributed_c10d._get_default_group().abort()
        except Exception:  # noqa: BLE001 - aborted or destroyed already
            pass

    def _enable(self) -> None:
        """Says in the store that this rank recovers (dtrun restarts a lost
        worker alone only when every rank did) and arms the watch."""
        self._store.set(f"recovery/capable/{self.rank}", "1")
        self._arm()

    def _arm(self) -> None:
        with self._watch_lock:
            self._watched = self.generation

    def _disarm(self) -> None:
        with self._watch_lock:
            self._watched = -1

    def _watch(self) -> None:
        """Aborts the group when dtrun ends its generation (it writes the end
        key before it starts a replacement): a peer lost without closing its
        connections (a host cut off, NCCL's kernels waiting on a dead
        process) would otherwise leave this rank waiting for its timeout."""
        while not self._stopping.is_set():
            with self._watch_lock:
                generation = self._watched
            if generation < 0:
                self._stopping.wait(_WATCH_SLICE.total_seconds() / 4)
                continue
            try:
                self._watch_store.wait([_end_key(generation)], _WATCH_SLICE)
            except Exception:  # noqa: BLE001 - not yet, or the store unreachable: look again
                continue
            with self._watch_lock:
                if self._watched != generation:
                    continue  # recover() runs, or ran since
                self._watched = -1
                self._aborted = generation
            _log.warning("rtd: generation %d ends (a worker was lost): aborting the group",
                         generation)
            self._abort_group()

    def check(self) -> None:
        """Between backward and the optimizer's step: waits until the device
        has done this step's work (the current stream; on CPU nothing to
        wait for) and raises the group's failure, if its communicators failed
        (a peer lost, an abort). Then no update comes from a collective cut
        short: the step is discarded whole, on every rank, and redone."""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.current_stream().synchronize()
        with self._watch_lock:
            aborted = self._aborted == self.generation
        if aborted:  # Gloo's communicators carry no failure of their own
            raise RuntimeError(f"rt_dist.torch.recovery: the group of generation "
                               f"{self.generation} was aborted: a worker of the job was lost")
        for backend in self._backends:
            backend.check()

    def resume(self, step: int) -> int:
        """Before the first step: a replacement receives a survivor's state and
        its step; every other rank returns ``step``."""
        if not self.enabled or not self.replacement:
            return step
        return self._sync(step)

    def recover(self, error: BaseException, step: int) -> int:
        """After a step raised ``error``: closes the group, waits (up to
        RTD_RECOVERY_WAIT_S) for dtrun to start the lost worker again, opens
        the group of the new generation and agrees on the lowest-ranked
        survivor's state; returns the step to go on from. Raises ``error``
        when recovery is off, no replacement came, or the job moved to
        another round (a node lost or joined: not handled here)."""
        if not self.enabled:
            raise error
        start = time.monotonic()
        self._disarm()
        self._abort_group()
        aborted = time.monotonic()
        # The failed step's frames hold the old DDP (and its group): let them go.
        traceback.clear_frames(error.__traceback__)
        dist.destroy_process_group()
        closed = time.monotonic()
        move_key = f"recovery/move/{self.rank}"
        while True:
            generation = self._store.add(_GENERATION_KEY, 0)
            if generation > self.generation:
                break
            if self._store.check([move_key]):
                raise RuntimeError("rt_dist.torch.recovery: dtrun moves this worker to another "
                                   "round (a node was lost or joined); PyTorch jobs do not move "
                                   "in place yet") from error
            if time.monotonic() - start > self._wait_s:
                _log.warning("rtd: no replacement worker started within %.0f s "
                             "(RTD_RECOVERY_WAIT_S): the failure is the job's", self._wait_s)
                raise error
            time.sleep(_POLL_S)
        learned = time.monotonic()
        self.generation = generation
        self._open_group()
        self._enable()
        step = self._sync(step)
        _log.warning("rtd: rank %d recovered in generation %d: %.0f ms to close the group "
                     "(%.0f ms its abort), %.0f ms more to learn of the replacement, %.0f ms to "
                     "rebuild and agree", self.rank, generation, (closed - start) * 1e3,
                     (aborted - start) * 1e3, (learned - closed) * 1e3,
                     (time.monotonic() - learned) * 1e3)
        return step

    def _sync(self, step: int) -> int:
        """Collective: every rank takes the state and step of the lowest rank
        that holds state (through the store, then broadcast over the group)."""
        prefix = f"gen{self.generation}/sync/"
        self._store.set(prefix + str(self.rank), str(step) if self._has_state else "-")
        source = -1
        for r in range(self.world_size):
            value = self._store.get(prefix + str(r)).decode()
            if value == "-":
                continue
            try:
                step = int(value)
            except ValueError:
                raise RuntimeError(f"rt_dist.torch.recovery: rank {r} wrote a malformed step "
                                   f"{value!r}") from None
            source = r
            break
        if source < 0:
            raise RuntimeError(f"rt_dist.torch.recovery: no rank of generation {self.generation} "
                               "holds the state (every one is a replacement); restart from a "
                               "checkpoint")
        for s in self._state:
            if isinstance(s, torch.nn.Module):
                for t in s.state_dict(keep_vars=False).values():
                    dist.broadcast(t, source)
                for p in s.parameters():
                    p.grad = None  # the failed step's, partly reduced
            else:
                self._sync_optimizer(s, source)
        self._has_state = True
        _log.warning("rtd: rank %d has the state of rank %d: resuming after step %d", self.rank,
                     source, step)
        return step

    def _sync_optimizer(self, optimizer: torch.optim.Optimizer, source: int) -> None:
        # A replacement's optimizer has no state yet (made at its first step):
        # the source describes its state dict, every other rank builds one of
        # that shape, the tensors are broadcast into it, and it is loaded.
        tensors: list[torch.Tensor] = []
        mine = optimizer.state_dict() if self.rank == source else None
        meta = [_describe(mine, tensors) if mine is not None else None]
        dist.broadcast_object_list(meta, source)
        device = next((p.device for g in optimizer.param_groups for p in g["params"]),
                      torch.device("cpu"))
        if self.rank != source:
            tensors = []
            mine = _build(meta[0], tensors, device)
        for t in tensors:
            dist.broadcast(t, source)
        if self.rank != source:
            optimizer.load_state_dict(mine)
