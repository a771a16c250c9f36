"""The ``rtd`` backend of torch.distributed: librt_dist's collectives under
PyTorch's own DDP, FSDP2 and scripts.

    import rt_dist.torch              # or nothing: torch loads it (see below)
    torch.distributed.init_process_group("rtd")

CPU tensors go through Gloo, CUDA tensors through NCCL and, within a host,
all-reductions of sums and averages by copy engines (RTD_TORCH_COPY_ENGINES=0
turns that off). ``import torch`` registers the backend by itself where this
package's entry point is visible (dtrun puts it on the workers' PYTHONPATH).
See docs/torch.md.
"""

import torch
import torch.distributed as dist

from rt_dist.torch._process_group import ProcessGroupRTD

__all__ = ["ProcessGroupRTD", "register"]

BACKEND = "rtd"


def _create(store, rank, size, timeout):
    return ProcessGroupRTD(store, rank, size, timeout)


def register():
    """Registers the backend with torch.distributed (once; later calls do nothing)."""
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])


register()
