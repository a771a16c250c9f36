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

A slot is parked where no FSDP2 buffer is needed (park(): at the end of the
root's forward and of the backward, see fsdp_comms): its tensor goes back to
torch's caching allocator, so that the loss and the optimizer step, where a
step's memory peaks, may use it, as FSDP2 on nccl frees its own buffers
there. The next lend takes a buffer of the same size again; the caching
allocator, given the same step as before, most often hands out the same
block, and the set-up the peers mapped holds. On GPUs, whether it moved on
any rank (another address, or the same one in memory the allocator released
and allocated again, which librt_dist tells by the driver's allocation id)
is agreed through the store (collective, at the first lend after a park:
every rank parks at the same points and lends in the same order); where it
moved, the set-up is made afresh at its next use. On host memory no peer
maps it: a rank whose buffer moved sets up afresh alone. Should torch give a
parked buffer's memory back to the driver meanwhile (torch.cuda.empty_cache(),
or its retry after running out of memory), the peers still map it until then:
CUDA leaves that case undefined, and nothing reads the memory before the set-up
is made afresh (tests/torch/train.py empties the cache mid-run on GPUs).
"""

import torch

RING = {"all_gather": 2, "reduce_scatter": 1}
# On GPUs, smaller buffers are not lent: NCCL's kernels move them faster than
# the copy engines' handshakes (the staged path's threshold, kMinBytes).
MIN_CUDA_BYTES = 1 << 20
# What ShardSlots.stats counts: calls through lent buffers, gathers landed
# elsewhere, lends refused, buffers parked, and parked buffers that came back
# elsewhere on some rank (set up afresh).
STATS = ("all_gather", "reduce_scatter", "landed", "not lent", "parked", "moved")


def _use_count(storage):
    return torch._C._storage_Use_Count(storage._cdata)


class _Slot:
    def __init__(self, numel, dtype, device, epoch):
        self.numel, self.dtype, self.device = numel, dtype, device
        self._take()
        self.ptr = self.base.data_ptr()  # where its set-ups have it
        self.epoch = epoch  # the parks it has been through (see ShardSlots.lend)
        self.handles = {}  # reduce-scatter op (C code) or None -> persistent handle
        self.method = None

    def _take(self):  # on the borrower's stream, as its own buffer would be
        self.base = torch.empty((self.numel,), dtype=self.dtype, device=self.device)
        self._storage = self.base.untyped_storage()
        self._idle = _use_count(self._storage)

    def idle(self):
        return self.base is None or _use_count(self._storage) <= self._idle

    def holders(self):
        """How many tensors (or storages) hold the buffer besides the slot."""
        return 0 if self.base is None else _use_count(self._storage) - self._idle

    def lend(self):
        if self.base is None:
            self._take()
        return self.base.view(self.base.shape)  # an alias: it counts as a use

    def park(self):
        """Gives an idle buffer back to torch's allocator; whether it did.
        No stream waits: idle, the buffer was let go of by its borrower, who
        lets go of a block only once the stream that allocated it is ordered
        after its last use, its collective's included (the caching
        allocator's rule, which FSDP2 keeps for its own buffers; the slot
        was allocated on the stream of the borrower's allocate())."""
        if self.base is None or not self.idle():
            return False
        self.base = self._storage = None
        return True


class ShardSlots:
    """The slots of one communicator (_Comm), by kind, size and dtype."""

    def __init__(self, comm, copy_engines):
        self._comm = comm
        self._copy_engines = 1 if copy_engines else 0
        self._rings = {}  # (kind, numel, dtype) -> [_Slot]
        self.stats = dict.fromkeys(STATS, 0)
        self.methods = set()
        self.epoch = 0  # parks so far (the same count on every rank)

    def lend(self, kind, numel, dtype, reclaim=None):
        """A tensor of numel elements from a slot of this kind, or None.
        reclaim(buffer, holders): whether a busy slot may be lent again (see
        above)."""
        if self._comm.cuda and numel * dtype.itemsize < MIN_CUDA_BYTES:
            return None
        ring = self._rings.setdefault((kind, numel, dtype), [])
        slot = next((s for s in ring if s.idle()), None)
        if slot is None and reclaim is not None:
            slot = next((s for s in ring if reclaim(s.base, s.holders())), None)
        if slot is None:
            if len(ring) >= RING[kind]:
                self.stats["not lent"] += 1
                return None
            c = self._comm
            device = torch.device("cuda", c.device) if c.cuda else torch.device("cpu")
            slot = _Slot(numel, dtype, device, self.epoch)
            ring.append(slot)
        lent = slot.lend()
        if slot.epoch != self.epoch:
            self._settle(slot)
        return lent

    def park(self):
        """Parks every idle slot (see above); every rank at the same point."""
        self.epoch += 1
        for ring in self._rings.values():
            for slot in ring:
                if slot.park():
                    self.stats["parked"] += 1

    def _settle(self, slot):
        """A slot's first lend since a park: where its buffer moved, drops
        its set-ups (the next use sets up afresh). On GPUs a set-up is
        collective (the peers map the buffer), so every rank drops its own
        where the buffer moved on any rank; on host memory a set-up is each
        rank's own, and no rank need ask."""
        slot.epoch = self.epoch
        c = self._comm
        moved = slot.base.data_ptr() != slot.ptr or not all(
            c.lib.rtd_persistent_sources_unchanged(h) for h in slot.handles.values())
        if slot.handles and c.cuda:
            moved = c.any_rank(moved, "a parked FSDP2 buffer's place")
        if slot.handles and moved:
            self._drop(slot)
            self.stats["moved"] += 1
        slot.ptr = slot.base.data_ptr()

    def _drop(self, slot):
        for h in slot.handles.values():
            self._comm.lib.rtd_persistent_free(h)
        slot.handles.clear()

    def held(self):
        """The buffers, by kind: (buffers, sizes they are of, bytes held now:
        a parked one's are not)."""
        out = {}
        for (kind, _, _), ring in self._rings.items():
            count, sizes, size = out.get(kind, (0, 0, 0))
            out[kind] = (count + len(ring), sizes + 1,
                         size + sum(s.numel * s.dtype.itemsize for s in ring if s.base is not None))
        return out

    def find(self, kind, t):
        """The slot whose whole buffer t is (same place, size and dtype), or None."""
        for slot in self._rings.get((kind, t.numel(), t.dtype), ()):
            if slot.base is not None and slot.base.data_ptr() == t.data_ptr():
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
            slot.ptr = ptr
            slot.method = c.lib.rtd_persistent_method(h).decode()
            self.methods.add(slot.method)
        return h

    def free(self):
        """Frees every set-up (before the communicator); the buffers go with them."""
        for ring in self._rings.values():
            for slot in ring:
                self._drop(slot)
        self._rings.clear()
        self.stats = dict.fromkeys(STATS, 0)
        self.methods = set()

