"""torch.distributed.checkpoint (DCP) into librt_dist's checkpoint format.

    import torch.distributed.checkpoint as dcp
    from rt_dist.torch.checkpoint import CheckpointReader, CheckpointWriter

    dcp.save(state, storage_writer=CheckpointWriter("ckpt", step=step))
    dcp.async_save(state, storage_writer=CheckpointWriter("ckpt", step=step))
    reader = CheckpointReader("ckpt")          # the newest that reads and checks
    dcp.load(state, storage_reader=reader)     # reader.step: the step loaded

Each rank writes its own file of the step's directory (pieces with a CRC-32C
each), rank 0 commits the step atomically and keeps the newest `keep_last`;
the directory is locked for the job (docs/checkpoints.md). A checkpoint saved
on N ranks loads on M; a load that finds a piece corrupted names it and loads
the checkpoint before. It works whatever the backend of the group.

DCP's tensors are stored as our tensors (one per fully qualified name, its
chunks as element ranges of the flattened tensor); its other items (pickled
objects: param_groups, a scheduler's state) and tensors of dtypes our format
does not hold go into the manifest's meta, base64-encoded. A reader rebuilds
DCP's Metadata from the manifest, so that checkpoints of C++ trainers load
through DCP as well.
"""

import base64
import ctypes
import io
import json
import os
from typing import Any

import torch
from torch.futures import Future
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    ReadItem,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint._nested_dict import flatten_state_dict, unflatten_state_dict
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult

from rt_dist.torch import _checkpoint_slots as _s

__all__ = ["CheckpointReader", "CheckpointWriter", "close"]

PathLike = str | os.PathLike


def close(path: PathLike | None = None) -> None:
    """Releases the checkpoint directory `path` (every one: None) in this
    process: drops its lock and its pinned copies for async saves (a save
    still writing keeps its own until it ends). Every rank calls it."""
    _s.close_slots(None if path is None else os.path.abspath(os.fspath(path)))


def _sync_current_stream() -> None:
    """Waits for the work queued on the current CUDA stream, once a save or
    load (the library reads and writes GPU tensors on streams of its own)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.current_stream().synchronize()


class CheckpointWriter(StorageWriter):
    """A DCP StorageWriter into a librt_dist checkpoint directory.

    step: the step's number (None: one more than the newest there).
    keep_last: the checkpoints kept (0: all). io_threads: pieces each rank
    writes at once. Pass the same values on every rank; every rank of the
    group calls dcp.save (or async_save), as DCP requires. For
    dcp.async_save, the writer stages the state itself: GPU tensors are
    copied into pinned host memory kept from save to save, on a side stream
    after the work queued so far, and the current stream waits for those
    copies only, not the host.

    until_step: an optimizer (or several) whose parameters and state are in
    the saved state. The current stream then waits at once only for the
    copies of the other tensors; the copies of that optimizer's tensors run
    beside the next forward and backward, and its next step() makes the
    current stream wait for them (a step pre-hook): the training stream is
    held only when backward ends before they do. Only for a state whose
    other tensors nothing but that optimizer's step writes in place."""

    def __init__(self, path: PathLike, *, step: int | None = None, keep_last: int = 3,
                 io_threads: int = 4, piece_bytes: int = 64 << 20,
                 until_step: torch.optim.Optimizer | list[torch.optim.Optimizer] | None = None
                 ) -> None:
        super().__init__()
        if until_step is None:
            until_step = []
        elif isinstance(until_step, torch.optim.Optimizer):
            until_step = [until_step]
        if not all(isinstance(o, torch.optim.Optimizer) for o in until_step):
            raise ValueError("until_step takes a torch.optim.Optimizer or a list of them, "
                             f"not {until_step!r}")
        self._until_step = list(until_step)
        self.path = os.path.abspath(os.fspath(path))
        self.step = step
        if step is not None and (not isinstance(step, int) or step < 0):
            raise ValueError(f"step must be a non-negative int, not {step!r}")
        self._settings = (int(keep_last), int(io_threads), int(piece_bytes))
        self._event = None  # the staging copies' event (async_save)
        self._staging = None  # the copies stage() made, for write_data

    # DCP's calls, in order.
    def reset(self, checkpoint_id: PathLike | None = None) -> None:
        if checkpoint_id is not None:
            self.path = os.path.abspath(os.fspath(checkpoint_id))

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator

    def storage_meta(self) -> None:
        return None

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        step = self.step if self.step is not None else _s.next_step(self.path)
        return [SavePlan(p.items, {"step": step, "rank": r, "world": len(plans)}, p.planner_data,
                         p.usable) for r, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        info = plan.storage_data
        try:
            slot = _s.slot(self.path, info["rank"], info["world"], self._settings)
            if self._event is not None:
                self._event.synchronize()  # the staging copies this save reads
            results = self._write(slot, info["step"], plan, planner)
        finally:
            if self._staging is not None:  # its copies are free for the next async save
                self._staging.idle.set()
        future: Future[list[WriteResult]] = Future()
        future.set_result(results)
        return future

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        pass  # committed by write_data, on every rank together

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))

    # async_save's staging (DCP's AsyncStager protocol).
    _synchronize_after_execute = False

    @property
    def should_synchronize_after_execute(self) -> bool:
        return self._synchronize_after_execute

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        staging = self._staging = _s.staging(self.path)
        signature = _s.signature(state_dict)
        if staging.signature != signature:
            staging.state = _create_cpu_state_dict(state_dict,
                                                   pin_memory=torch.cuda.is_available())
            staging.signature = signature
        staging.idle.clear()
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return _copy_state_dict(state_dict, staging.state)
        current = torch.cuda.current_stream()
        side = _s.side_stream(current.device)
        side.wait_stream(current)
        if not self._until_step:
            with torch.cuda.stream(side):
                staged = _copy_state_dict(state_dict, staging.state, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record(side)
            current.wait_event(self._event)  # later writes to the state wait for the copies
            return staged
        # The other tensors first, waited for at once; then the optimizers'
        # tensors, waited for by their next step.
        flat, mapping = flatten_state_dict(state_dict)
        flat_copies, _ = flatten_state_dict(staging.state)
        owned = _s.optimizer_storages(self._until_step)
        later = [k for k, v in flat.items() if _s.storage_of(v) in owned]
        later_keys = set(later)
        first = [k for k in flat if k not in later_keys]
        with torch.cuda.stream(side):
            staged = _copy_state_dict({k: flat[k] for k in first},
                                      {k: flat_copies[k] for k in first}, non_blocking=True)
            others = torch.cuda.Event()
            others.record(side)
            staged.update(_copy_state_dict({k: flat[k] for k in later},
                                           {k: flat_copies[k] for k in later}, non_blocking=True))
        current.wait_event(others)
        self._event = torch.cuda.Event()
        self._event.record(side)
        _s.wait_before_step(self._until_step, self._event)
        return unflatten_state_dict(staged, mapping)

    def synchronize_staging(self) -> None:
        if self._event is not None:
            self._event.synchronize()

    def close(self) -> None:
        pass

    def _write(self, slot: Any, step: int, plan: SavePlan,
               planner: SavePlanner) -> list[WriteResult]:
        c = _s.capi()
        tensors = _s.Tensors()
        meta, results, error = {}, [], None
        try:
            _sync_current_stream()  # the writes of the tensors to save have landed
            for item in plan.items:
                results.append(self._prepare(item, planner, tensors, meta))
        except Exception as e:  # every rank learns it in agree(), none waits
            error = f"{type(e).__name__}: {e}"
        meta = _s.agree(slot, f"save of step {step}", error, meta)
        array = tensors.array()
        keys = [s.encode() for kv in meta.items() for s in kv]
        meta_array = (ctypes.c_char_p * max(1, len(keys)))(*keys)
        _s.check(c.lib.rtd_ckpt_save(slot.handle, step, array, len(tensors.order), meta_array,
                                     len(meta)))
        return results

    @staticmethod
    def _prepare(item: Any, planner: SavePlanner, tensors: Any,
                 meta: dict[str, str]) -> WriteResult:
        """One write item: a tensor's chunk as ranges in `tensors`, or an
        item kept in the manifest's meta."""
        fqn = item.index.fqn
        if item.type == WriteItemType.BYTE_IO:
            data = planner.resolve_data(item)
            raw = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
            meta[_s.BYTES + fqn] = base64.b64encode(raw).decode()
            return WriteResult(item.index, len(raw), None)
        t = _s.local(planner.resolve_data(item)).contiguous()
        chunk = item.tensor_data.chunk
        shape = list(item.tensor_data.size)
        if t.dtype in _s.DTYPES:
            tensors.add(fqn, shape, chunk.offsets, t)
            return WriteResult(item.index, t.numel() * t.element_size(), None)
        if list(chunk.offsets) != [0] * len(shape) or list(chunk.sizes) != shape:
            raise ValueError(f"tensor '{fqn}' is {t.dtype}, which librt_dist's checkpoints "
                             f"hold only whole (from one rank); this rank holds a part of it")
        buf = io.BytesIO()
        torch.save(t.cpu(), buf)
        meta[_s.TENSOR + fqn] = json.dumps({
            "dtype": str(t.dtype).removeprefix("torch."), "shape": shape,
            "data": base64.b64encode(buf.getvalue()).decode()})
        return WriteResult(item.index, t.numel() * t.element_size(), None)


class CheckpointReader(StorageReader):
    """A DCP StorageReader of a librt_dist checkpoint directory (written by
    CheckpointWriter or by a C++ trainer's rtd::ckpt::Checkpointer).

    step: load this step (None: the newest that reads and checks). fallback:
    when a piece of it fails its check on any rank, load the one before
    (every rank the same; the default unless a step is named). After
    dcp.load, `step` is the step loaded."""

    def __init__(self, path: PathLike, *, step: int | None = None,
                 fallback: bool | None = None) -> None:
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        self._asked = step
        self.step = None
        self.fallback = (step is None) if fallback is None else bool(fallback)
        self._manifest_step = None
        self._shapes = {}  # the manifest's tensors: name -> shape
        self._dtypes = {}  # and dtype
        self._error = None  # why read_metadata could not read one

    def reset(self, checkpoint_id: PathLike | None = None) -> None:
        if checkpoint_id is not None:
            self.path = os.path.abspath(os.fspath(checkpoint_id))

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        # dcp.load drops what read_metadata raises (it tries a rank-local
        # fallback, then fails with "metadata is None"): the reason is kept
        # and raised by set_up_storage_reader, which dcp.load reports.
        self._error = None
        try:
            return self._read_metadata()
        except Exception as e:
            self._error = e
            return Metadata(state_dict_metadata={})

    def _read_metadata(self) -> Metadata:
        c = _s.capi()
        step = ctypes.c_int64(-1)
        asked = -1 if self._asked is None else self._asked
        text = c.lib.rtd_ckpt_read_manifest(self.path.encode(), asked, ctypes.byref(step))
        if not text:
            raise c.last_error()
        try:
            manifest = json.loads(ctypes.string_at(text).decode())
        finally:
            c.lib.rtd_free(text)
        if self._asked is not None and step.value != self._asked:
            raise ValueError(f"{self.path} has no readable checkpoint of step {self._asked} "
                             f"(the newest before it is {step.value})")
        self._manifest_step = step.value
        entries = {}
        self._shapes, self._dtypes = {}, {}
        for t in manifest.get("tensors", []):
            shape = torch.Size(int(d) for d in t.get("shape", []))
            self._shapes[t["name"]] = list(shape)
            self._dtypes[t["name"]] = _s.DTYPE_NAMES[t["dtype"]]
            entries[t["name"]] = TensorStorageMetadata(
                TensorProperties(dtype=_s.DTYPE_NAMES[t["dtype"]]), shape,
                [ChunkStorageMetadata(torch.Size([0] * len(shape)), shape)])
        for key, value in manifest.get("meta", {}).items():
            if key.startswith(_s.BYTES):
                entries[key[len(_s.BYTES):]] = BytesStorageMetadata()
            elif key.startswith(_s.TENSOR):
                try:
                    info = json.loads(value)
                    dtype = getattr(torch, info["dtype"])
                    if not isinstance(dtype, torch.dtype):
                        raise ValueError(f"{info['dtype']!r} is not a dtype")
                    shape = torch.Size(int(d) for d in info["shape"])
                except (ValueError, KeyError, TypeError, AttributeError) as e:
                    raise ValueError(f"{self.path} step {step.value}: the manifest's entry "
                                     f"{key!r} is malformed ({e})") from None
                entries[key[len(_s.TENSOR):]] = TensorStorageMetadata(
                    TensorProperties(dtype=dtype), shape,
                    [ChunkStorageMetadata(torch.Size([0] * len(shape)), shape)])
        return Metadata(state_dict_metadata=entries)

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any,
                              **kwargs: Any) -> None:
        if self._error is not None:
            raise self._error
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return [LoadPlan(p.items, {"rank": r, "world": len(plans)}, p.planner_data)
                for r, p in enumerate(plans)]

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        c = _s.capi()
        info = plan.storage_data
        slot = _s.slot(self.path, info["rank"], info["world"])
        tensors = _s.Tensors()
        targets = []  # (read item, destination, buffer the load fills)
        from_meta, error = [], None
        try:
            _sync_current_stream()  # nothing queued still reads or writes the destinations
            for item in plan.items:
                fqn = item.storage_index.fqn
                if item.type == LoadItemType.BYTE_IO or fqn not in self._shapes:
                    from_meta.append(item)
                    continue
                target = planner.resolve_tensor(item).detach()
                dtype = self._dtypes[fqn]
                if target.is_contiguous() and target.dtype == dtype:
                    buf = target  # filled in place (a GPU's through pinned buffers)
                else:
                    buf = torch.empty(tuple(item.lengths), dtype=dtype)
                tensors.add(fqn, self._shapes[fqn], item.storage_offsets, buf)
                targets.append((item, target, buf))
        except Exception as e:  # every rank learns it in agree(), none waits
            error = f"{type(e).__name__}: {e}"
        _s.agree(slot, "load", error)
        meta = {}

        @c.META_FN
        def on_meta(_arg: Any, key: bytes, value: bytes) -> None:
            meta[key.decode()] = value.decode()

        step = ctypes.c_int64(-1)
        array = tensors.array()
        _s.check(c.lib.rtd_ckpt_load(slot.handle, array, len(tensors.order), self._manifest_step,
                                   1 if self.fallback else 0, ctypes.byref(step), on_meta, None))
        self.step = step.value
        for item, target, buf in targets:
            if buf is not target:
                target.copy_(buf)
            planner.commit_tensor(item, target)
        for item in from_meta:
            self._from_meta(item, planner, meta)
        future: Future[None] = Future()
        future.set_result(None)
        return future

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))

    def _from_meta(self, item: ReadItem, planner: LoadPlanner, meta: dict[str, str]) -> None:
        fqn = item.storage_index.fqn
        if item.type == LoadItemType.BYTE_IO:
            value = meta.get(_s.BYTES + fqn)
            if value is None:
                raise ValueError(f"checkpoint step {self.step} in {self.path} has no item '{fqn}'")
            planner.load_bytes(item, io.BytesIO(base64.b64decode(value)))
            return
        value = meta.get(_s.TENSOR + fqn)
        if value is None:
            raise ValueError(f"checkpoint step {self.step} in {self.path} has no tensor '{fqn}'")
        whole = torch.load(io.BytesIO(base64.b64decode(json.loads(value)["data"])),
                           weights_only=True)
        part = whole
        for d, (at, n) in enumerate(zip(item.storage_offsets, item.lengths, strict=True)):
            part = part.narrow(d, at, n)
        target = planner.resolve_tensor(item).detach()
        target.copy_(part)
        planner.commit_tensor(item, target)
