"""When fsdp_comms' lent buffers are parked and taken back
(rt_dist.torch._shard_slots), on CPU with a stand-in for the communicator:
- park() parks the idle buffers only, and counts the parks;
- a parked buffer is lent again, as a new tensor of the same size;
- on host memory a rank whose buffer moved (another address, or memory the
  set-up says is no longer its own) drops its set-ups alone, asking no one;
- on GPUs every rank asks the others (any_rank) at a buffer's first lend
  after a park, and drops its set-ups where any rank's moved, its own
  unmoved or not; a buffer never set up asks no one.
    dtrun --nproc-per-node=1 python tests/torch/shard_slots.py
"""

import torch

from rt_dist.torch import _shard_slots
from rt_dist.torch._shard_slots import ShardSlots


class Lib:
    def __init__(self):
        self.freed, self.unchanged = [], True

    def rtd_persistent_free(self, h):
        self.freed.append(h)

    def rtd_persistent_sources_unchanged(self, h):
        return 1 if self.unchanged else 0


class Comm:
    """What ShardSlots reads of a _Comm."""

    def __init__(self):
        self.cuda, self.device, self.lib = False, -1, Lib()
        self.asked, self.others_moved = [], False

    def any_rank(self, flag, what):
        self.asked.append(flag)
        return flag or self.others_moved


def check(what, got, want):
    assert got == want, f"{what}: {got}, expected {want}"


N = 1 << 18  # 1 MiB of float32: lent on GPUs too
comm = Comm()
slots = ShardSlots(comm, copy_engines=True)
gather = slots.lend("all_gather", N, torch.float32)
reduce = slots.lend("reduce_scatter", N, torch.float32)
g_slot = slots.find("all_gather", gather)
r_slot = slots.find("reduce_scatter", reduce)
for s in (g_slot, r_slot):  # as a set-up at first use leaves them
    s.handles[None] = f"set-up of {id(s)}"
    s.ptr = s.base.data_ptr()

# A park leaves a buffer still held alone; the idle one goes to torch.
del gather
slots.park()
check("parked after the first park", slots.stats["parked"], 1)
check("the idle buffer's tensor", g_slot.base, None)
check("the held buffer's tensor kept", r_slot.base is not None, True)
check("bytes held after the park", slots.held()["all_gather"][2], 0)

# Host memory: taken back, its set-up kept or dropped by this rank alone.
comm.lib.unchanged = False  # the memory is not what the set-up mapped
gather = slots.lend("all_gather", N, torch.float32)
check("a parked buffer lent again", g_slot.base is not None and gather.numel() == N, True)
check("host memory asks no one", comm.asked, [])
check("set-ups dropped where the memory changed", comm.lib.freed, [f"set-up of {id(g_slot)}"])
check("moved", slots.stats["moved"], 1)
check("no set-up left", g_slot.handles, {})
check("where its next set-up will have it", g_slot.ptr, g_slot.base.data_ptr())

# GPUs: every rank asks, and drops where any rank's buffer moved.
comm.cuda, comm.lib.unchanged = True, True
g_slot.handles[None] = "second set-up"
del gather, reduce
slots.park()
check("both idle buffers parked", slots.stats["parked"], 3)
comm.others_moved = True
before = g_slot.ptr
gather = slots.lend("all_gather", N, torch.float32)
moved_here = g_slot.base.data_ptr() != before  # the allocator's choice
check("asked once, saying whether it moved here", comm.asked, [moved_here])
check("dropped: another rank's moved", comm.lib.freed[-1], "second set-up")
check("moved", slots.stats["moved"], 2)
# The reduction's buffer, set up and taken back where nothing moved: kept.
# (The caching allocator most often hands the same block back; here the
# stand-in always does.)
block = torch.empty(N)


def same_block(slot=r_slot):
    slot.base = block.view(N)
    slot._storage = slot.base.untyped_storage()
    slot._idle = _shard_slots._use_count(slot._storage)


r_slot._take, r_slot.ptr = same_block, block.data_ptr()
comm.others_moved = False
reduce = slots.lend("reduce_scatter", N, torch.float32)
check("asked again, saying it did not move here", comm.asked[1:], [False])
check("kept where nothing moved", r_slot.handles, {None: f"set-up of {id(r_slot)}"})
check("moved", slots.stats["moved"], 2)
# Lent again within the same park: nothing asked.
del gather
asked = len(comm.asked)
gather = slots.lend("all_gather", N, torch.float32)
check("no question between parks", len(comm.asked), asked)
# A buffer never set up asks no one, even on GPUs.
del gather
slots.park()
gather = slots.lend("all_gather", N, torch.float32)
check("a buffer without a set-up asks no one", len(comm.asked), asked)
print("shard slots: parks, lends after a park, and when ranks ask each other: as the policy says")
