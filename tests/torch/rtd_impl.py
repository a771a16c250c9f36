"""Which implementation of the rtd backend a test runs on (RTD_TORCH_IMPL:
cpp, the default, or python) and its backend object for a group."""

import os

import torch
import torch.distributed as dist

IMPL = os.environ.get("RTD_TORCH_IMPL", "cpp")


def backend(group=None, device="cpu"):
    """The rtd backend behind a group: the C++ ProcessGroupRTD torch keeps
    per device, or the Python process group itself."""
    g = group if group is not None else dist.group.WORLD
    if IMPL == "python":
        return g
    return g._get_backend(torch.device(device))


def calls(group=None, device="cpu"):
    """Operations the group's rtd backend launched so far."""
    return backend(group, device).calls
