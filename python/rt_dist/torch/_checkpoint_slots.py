"""The machinery under rt_dist.torch.checkpoint: one librt_dist
checkpointer per directory in a process (its lock, its save and load
counts, the pinned copies of async saves), DCP's chunks as element ranges of
flattened tensors, and the items kept in the manifest's meta."""

import ctypes
import json
import os
import re
import threading

import torch
import torch.distributed as dist

DTYPES = {torch.float32: 0, torch.float64: 1, torch.int32: 2, torch.int64: 3,
           torch.bfloat16: 4, torch.float16: 5}
DTYPE_NAMES = {"float32": torch.float32, "float64": torch.float64, "int32": torch.int32,
                "int64": torch.int64, "bfloat16": torch.bfloat16, "float16": torch.float16}
BYTES = "dcp/bytes/"    # a pickled item, base64
TENSOR = "dcp/tensor/"  # a tensor of a dtype our format lacks: {"dtype", "shape", "data"}
_MAX_RUNS = 1 << 24      # element ranges of one chunk


def capi():
    from rt_dist import _capi  # loads librt_dist only when a checkpoint is used

    return _capi


def check(rc):
    if rc != 0:
        raise capi().last_error()


class Slot:
    """One directory's checkpointer in this process, kept from save to save:
    it holds the directory's lock and counts the saves and loads, which
    every rank makes alike."""

    def __init__(self, path, rank, world, store, keep_last, io_threads, piece_bytes):
        from rt_dist.torch._comm import _StoreBridge

        c = capi()
        self.path, self.rank, self.world = path, rank, world
        self.store = store
        self.bridge = _StoreBridge(store)
        options = c.CkptOptions(path.encode(), keep_last, io_threads, piece_bytes)
        self.handle = c.lib.rtd_ckpt_create(ctypes.byref(self.bridge.ops), rank, world,
                                            ctypes.byref(options))
        if not self.handle:
            raise c.last_error()
        self.settings = (keep_last, io_threads, piece_bytes)
        self.agreements = 0  # agree() calls, alike on every rank

    def close(self):
        if self.handle:
            capi().lib.rtd_ckpt_destroy(self.handle)
            self.handle = None
        self.bridge.close()


_slots = {}
_slots_lock = threading.Lock()


def _group_identity():
    return id(dist.distributed_c10d._get_default_group()) if dist.is_initialized() else None


def slot(path, rank, world, settings=None):
    """The directory's checkpointer for this job's ranks (made at its first
    use). settings: (keep_last, io_threads, piece_bytes); None: a reader's,
    which takes the writer's where there is one."""
    key = (path, rank, world, _group_identity())
    with _slots_lock:
        slot = _slots.get(key)
        if slot is not None and settings is not None and slot.settings != settings:
            raise ValueError(
                f"checkpoint directory {path} is used with keep_last/io_threads/piece_bytes "
                f"{slot.settings} in this job; pass the same values (or call "
                f"rt_dist.torch.checkpoint.close({path!r}) on every rank first)")
        if slot is None:
            for old in [k for k in _slots if k[0] == path]:  # an earlier group's: its lock
                _slots.pop(old).close()
            if dist.is_initialized():
                store = dist.PrefixStore("rt_dist.checkpoint/",
                                         dist.distributed_c10d._get_default_store())
            else:
                store = dist.HashStore()
            slot = _slots[key] = Slot(path, rank, world, store,
                                       *(settings or (3, 4, 64 << 20)))
        return slot


def close_slots(path=None):
    """Releases the checkpoint directory `path` (all of them: None; absolute)
    in this process: its checkpointer (and lock) and its pinned copies."""
    with _slots_lock:
        for key in [k for k in _slots if path is None or k[0] == path]:
            _slots.pop(key).close()
        for key in [k for k in _stagings if path is None or k == path]:
            del _stagings[key]  # a save still writing holds its copies itself


def runs(offsets, sizes, shape):
    """The element ranges of the flattened tensor of `shape` that the chunk
    (offsets, sizes) covers, in the chunk's own row-major order: a list of
    (first, count)."""
    n = len(shape)
    if n == 0:
        return [(0, 1)]
    if any(s == 0 for s in sizes):
        return []
    strides = [1] * n
    for d in range(n - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    k = n - 1  # dims after k are whole: a run is sizes[k] rows of them
    while k > 0 and offsets[k] == 0 and sizes[k] == shape[k]:
        k -= 1
    run = sizes[k] * strides[k]
    count = 1
    for d in range(k):
        count *= sizes[d]
    if count > _MAX_RUNS:
        raise ValueError(f"a chunk of a tensor of shape {list(shape)} is {count} separate "
                         f"ranges (more than {_MAX_RUNS})")
    out = []
    index = [0] * k
    for _ in range(count):
        first = offsets[k] * strides[k]
        for d in range(k):
            first += (offsets[d] + index[d]) * strides[d]
        out.append((first, run))
        for d in range(k - 1, -1, -1):  # the next row, in row-major order
            index[d] += 1
            if index[d] < sizes[d]:
                break
            index[d] = 0
    return out


class Tensors:
    """The rtd_ckpt_tensor array of one save or load, and the buffers it
    points into (kept alive until the call returns)."""

    def __init__(self):
        self.order = []  # names, first seen first
        self.parts = {}  # name -> [dtype, shape, [(first, count, tensor, element offset)]]

    def add(self, name, shape, chunk_offsets, tensor):
        """tensor: the chunk's elements, contiguous, at chunk_offsets of a
        tensor of global `shape`."""
        entry = self.parts.get(name)
        if entry is None:
            self.order.append(name)
            entry = self.parts[name] = [tensor.dtype, list(shape), []]
        at = 0
        for first, count in runs(list(chunk_offsets), list(tensor.shape), list(shape)):
            entry[2].append((first, count, tensor, at))
            at += count

    def array(self):
        c = capi()
        self._keep = []
        out = (c.CkptTensor * len(self.order))()
        for i, name in enumerate(self.order):
            dtype, shape, ranges = self.parts[name]
            dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
            rs = (c.CkptRange * max(1, len(ranges)))()
            for j, (first, count, t, at) in enumerate(ranges):
                device = t.device.index if t.device.type == "cuda" else -1
                if t.device.type == "cuda" and device is None:
                    device = torch.cuda.current_device()
                rs[j] = c.CkptRange(first, count, t.data_ptr() + at * t.element_size(), device)
            encoded = name.encode()
            self._keep += [dims, rs, encoded]
            out[i] = c.CkptTensor(encoded, DTYPES[dtype], len(shape), dims, len(ranges), rs)
        self._keep.append(out)
        return out


def local(data):
    """A DTensor's local part, or the tensor itself, detached."""
    local = getattr(data, "_local_tensor", None)
    return (local if local is not None else data).detach()


def next_step(path):
    steps = [int(m.group(1)) for name in (os.listdir(path) if os.path.isdir(path) else [])
             if (m := re.fullmatch(r"step_(\d+)", name))]
    return max(steps) + 1 if steps else 0


def signature(state_dict):
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    flat, _ = flatten_state_dict(state_dict)
    return tuple((k, tuple(v.shape), v.dtype, str(v.device)) if isinstance(v, torch.Tensor)
                 else (k, type(v).__name__) for k, v in sorted(flat.items()))


class Staging:
    """A directory's pinned copies for async saves, kept from save to save
    while the state's tensors keep their shapes; `idle` while no save reads
    them."""

    def __init__(self):
        self.signature = None
        self.state = None
        self.idle = threading.Event()
        self.idle.set()


_stagings = {}


def staging(path):
    """The directory's copies for the next async save: the last save's, or,
    while that save has not read them yet (it is still writing, or failed
    before it began), new ones, so that a save never waits for another."""
    with _slots_lock:
        current = _stagings.get(path)
        if current is None or not current.idle.is_set():
            current = _stagings[path] = Staging()
        return current


def storage_of(value):
    """The address of the storage behind a tensor (a DTensor's local one), or None."""
    local = getattr(value, "_local_tensor", value)
    if not isinstance(local, torch.Tensor) or local.device.type != "cuda":
        return None
    return local.untyped_storage().data_ptr()


def optimizer_storages(optimizers):
    """The storages of the optimizers' parameters and state tensors."""
    found = set()
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                found.add(storage_of(p))
                for v in opt.state.get(p, {}).values():
                    found.add(storage_of(v))
    found.discard(None)
    return found


def wait_before_step(optimizers, event):
    """Makes the current stream wait for event before the next step() of
    each optimizer (once each; the host does not wait)."""
    for opt in optimizers:
        _wait_once_before_step(opt, event)


def _wait_once_before_step(opt, event):
    handle = None

    def hook(_opt, _args, _kwargs):
        torch.cuda.current_stream().wait_event(event)
        handle.remove()

    handle = opt.register_step_pre_hook(hook)


_side_streams = {}


def side_stream(device):
    if device not in _side_streams:
        _side_streams[device] = torch.cuda.Stream(device)
    return _side_streams[device]


def agree(slot, what, error, payload=None):
    """Before a collective save or load: every rank says whether it is
    ready (error: why not), so that a rank that failed to prepare fails every
    rank at once instead of leaving them waiting in the collective call.
    Rank 0 gets every rank's payload (a dict of str, merged); the others {}.
    Through the store: it works under any backend, and in async_save's
    thread too."""
    n = slot.agreements
    slot.agreements += 1
    if slot.world == 1:
        if error:
            raise RuntimeError(f"checkpoint {what} in {slot.path} not done: rank 0: {error}")
        return payload or {}
    prefix = f"dcp/{slot.path}/{n}/"
    if n > 0:  # every rank read the last one's keys before that collective call ended
        slot.store.delete_key(f"dcp/{slot.path}/{n - 1}/{slot.rank}")
    slot.store.set(prefix + str(slot.rank), json.dumps({"error": error, "payload": payload or {}}))
    errors, merged = [], {}
    for r in range(slot.world):
        key = prefix + str(r)
        slot.store.wait([key])
        said = json.loads(slot.store.get(key))
        if said["error"]:
            errors.append(f"rank {r}: {said['error']}")
        if slot.rank == 0:
            merged.update(said["payload"])
    if errors:
        raise RuntimeError(f"checkpoint {what} in {slot.path} not done: " + "; ".join(errors))
    return merged
