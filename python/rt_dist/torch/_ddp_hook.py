"""ddp_hook: PyTorch DDP's own buckets averaged in place by librt_dist.

    model = DDP(model, gradient_as_bucket_view=True)
    model.register_comm_hook(None, rt_dist.torch.ddp_hook)  # None: the default group

DDP's default path hands each bucket to allreduce(), which sees a new tensor
at each call: within a host, rtd then stages it through a buffer its peers
mapped once (a copy in and a copy out of every bucket). This hook tells the
group which bucket it is (its index), so the group sets each bucket up once
(ProcessGroupRTD.bucket_allreduce): the peers map DDP's own buffer, copy
engines reduce it where it lies, and the average is taken in the same pass
(with a hook, DDP leaves the division by the world size to the hook). DDP
allocates its buckets again once, after the first step, on every rank
alike; each is then set up again. On a group that is not rtd the hook is
PyTorch's allreduce_hook, so a script may register it whatever its backend.
"""

import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from rt_dist.torch._process_group import ProcessGroupRTD


def _first(fut):
    return fut.value()[0]


def ddp_hook(state, bucket):
    """A DDP comm hook (register_comm_hook(group or None, ddp_hook))."""
    group = state if state is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(group, ProcessGroupRTD):
        return default_hooks.allreduce_hook(state, bucket)
    work = group.bucket_allreduce(bucket.index(), bucket.buffer())
    return work.get_future().then(_first)
