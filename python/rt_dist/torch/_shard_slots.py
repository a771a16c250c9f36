"""Buffers of one communicator that its peers map once, lent to FSDP2 for the
outputs of its all-gathers and the inputs of its reduce-scatters (see
rt_dist.torch.fsdp_comms).

A slot is a tensor of torch's, kept for the life of the communicator, with a
persistent all-gather or reduce-scatter of librt_dist set up on it at its
first use (collective: every rank lends and uses its slots in the same order,
as FSDP2 calls for the same sizes in the same order on every rank). Within a
host, copy engines then read a peer's shards or gradients where FSDP2 wrote
them: no staging copy.

A slot is lent again once nothing holds the tensor lent (its storage is
referenced by the slot alone). That is the caching allocator's rule for a
block freed on the stream that allocates it, and FSDP2 keeps to it: it
orders the streams that write a new all-gather's input after the copy-out of
the one before last (implicit prefetch holds two), and a reduce-scatter's
copy-in after the reduce-scatter before it, before it lets go of the
buffers. Up to RING slots a size; past them (FSDP2 holding more than it
should), lend() returns None and the caller allocates as usual (the call
then takes the group's ordinary path).

A busy slot may also be lent again when the caller's reclaim() says the
only one holding it will not read it after an event, and makes the current
stream wait for that event: FSDP2's forward keeps the previous all-gather's
output until the next one's copy-out, though it reads it no more once its own
copy-out is done (see fsdp_comms). One all-gather buffer a size then serves.
"""

import torch

RING = {"all_gather": 2, "reduce_scatter": 1}
# On GPUs, smaller buffers are not lent: NCCL's kernels move them faster than
# the copy engines' handshakes (the staged path's threshold, kMinBytes).
MIN_CUDA_BYTES = 1 << 20


def _use_count(storage):
    return torch._C._storage_Use_Count(storage._cdata)


class _Slot:
    def __init__(self, numel, dtype, device):
        self.base = torch.empty((numel,), dtype=dtype, device=device)
        self._storage = self.base.untyped_storage()
        self._idle = _use_count(self._storage)
        self.handles = {}  # reduce-scatter op (C code) or None -> persistent handle
        self.method = None

    def idle(self):
        return _use_count(self._storage) <= self._idle

    def holders(self):
        """How many tensors (or storages) hold the buffer besides the slot."""
        return _use_count(self._storage) - self._idle

    def lend(self):
        return self.base.view(self.base.shape)  # an alias: it counts as a use


class ShardSlots:
    """The slots of one communicator (_Comm), by kind, size and dtype."""

    def __init__(self, comm, copy_engines):
        self._comm = comm
        self._copy_engines = 1 if copy_engines else 0
        self._rings = {}  # (kind, numel, dtype) -> [_Slot]
        self.stats = {"all_gather": 0, "reduce_scatter": 0, "landed": 0, "not lent": 0}
        self.methods = set()

    def lend(self, kind, numel, dtype, reclaim=None):
        """A tensor of numel elements from a slot of this kind, or None.
        reclaim(buffer, holders): whether a busy slot may be lent again (see
        above)."""
        if self._comm.cuda and numel * dtype.itemsize < MIN_CUDA_BYTES:
            return None
        ring = self._rings.setdefault((kind, numel, dtype), [])
        for slot in ring:
            if slot.idle():
                return slot.lend()
        if reclaim is not None:
            for slot in ring:
                if reclaim(slot.base, slot.holders()):
                    return slot.lend()
        if len(ring) < RING[kind]:
            device = torch.device("cuda", self._comm.device) if self._comm.cuda else "cpu"
            ring.append(_Slot(numel, dtype, device))
            return ring[-1].lend()
        self.stats["not lent"] += 1
        return None

    def held(self):
        """The buffers held, by kind: (buffers, sizes they are of, bytes)."""
        out = {}
        for (kind, _, _), ring in self._rings.items():
            count, sizes, size = out.get(kind, (0, 0, 0))
            out[kind] = (count + len(ring), sizes + 1,
                         size + sum(s.base.numel() * s.base.element_size() for s in ring))
        return out

    def find(self, kind, t):
        """The slot whose whole buffer t is (same place, size and dtype), or None."""
        for slot in self._rings.get((kind, t.numel(), t.dtype), ()):
            if slot.base.data_ptr() == t.data_ptr():
                return slot
        return None

    def handle(self, slot, kind, op, dtype_code, failed):
        """The slot's persistent collective for op, set up at its first use."""
        h = slot.handles.get(op)
        if h is None:
            c = self._comm
            ptr, n = slot.base.data_ptr(), slot.base.numel()
            if kind == "all_gather":
                h = c.lib.rtd_persistent_all_gather(c.handle, ptr, n, dtype_code, c.device,
                                                    self._copy_engines)
            else:
                h = c.lib.rtd_persistent_reduce_scatter(c.handle, ptr, n, dtype_code, op,
                                                        c.device, self._copy_engines)
            if not h:
                raise failed()
            slot.handles[op] = h
            slot.method = c.lib.rtd_persistent_method(h).decode()
            self.methods.add(slot.method)
        return h

    def free(self):
        """Frees every set-up (before the communicator); the buffers go with them."""
        for ring in self._rings.values():
            for slot in ring:
                for h in slot.handles.values():
                    self._comm.lib.rtd_persistent_free(h)
                slot.handles.clear()
        self._rings.clear()
        self.stats = dict.fromkeys(self.stats, 0)
        self.methods = set()

