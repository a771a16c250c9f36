"""Every environment variable the rt_dist package reads, and the one reader
of them (librt_dist's own are read by runtime/core/config.cc). docs/config.md's
table is generated from TABLE and librt_dist's (docs/gen_config.py).

A malformed value raises SettingError naming the variable and what it may be.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["TABLE", "SettingError", "choice", "count", "default", "switch", "text"]


class SettingError(ValueError):
    """A malformed value of an environment variable (the message names it)."""


@dataclass(frozen=True)
class Var:
    name: str
    default: str  # "" when unset means "absent"
    unit: str
    readers: str
    meaning: str  # Markdown, as docs/config.md prints it
    choices: tuple[str, ...] = ()


TABLE: tuple[Var, ...] = (
    Var("RTD_TORCH_ASYNC_ERRORS", "0", "0/1", "rt_dist.torch",
        "the rtd backend (docs/torch.md): 0 raises a CUDA communicator's failure found after its "
        "call returned at the group's next call, a `wait()` or the exit; 1 also raises it in the "
        "main thread at once, wherever it is (librt_dist's watchdog thread calls into Python "
        "then, and only then); read when a CUDA communicator is made", ("0", "1")),
    Var("RTD_TORCH_COPY_ENGINES", "0", "0/1", "rt_dist.torch",
        "the rtd backend of torch.distributed (docs/torch.md): 1 stages CUDA collectives of "
        "1 MiB and more through copy engines where they measure faster (RTD_CE_SITES to "
        "override), 0 sends every CUDA collective to NCCL's kernels (the Python backend's "
        "default: 1); read when a group is made", ("0", "1")),
    Var("RTD_TORCH_IMPL", "cpp", "word", "rt_dist.torch",
        "the rtd backend (docs/torch.md): `cpp`, the C++ `c10d::Backend`; `python`, the earlier "
        "backend over ctypes with its DDP and FSDP2 hooks (torch 2.11 only: on another torch it "
        "raises when a group is made); another value raises when a group is made",
        ("cpp", "python")),
    Var("RTD_TORCH_STREAM_PRIORITY", "high", "word", "rt_dist.torch",
        "the C++ rtd backend: its NCCL communicator's stream at the device's `high`est priority "
        "or the `default` one (as ProcessGroupNCCL's); another value raises when a group is made",
        ("high", "default")),
    Var("RTD_LIBRARY", "", "path", "rt_dist",
        "the path of `librt_dist.so.0` for the `rt_dist` Python package (unset: the build's or "
        "the install's, then the loader's search; `rt_dist/_capi.py`)"),
    Var("RTD_TORCH_DDP_HOOK", "1", "0/1", "rt_dist.torch",
        "1: a PyTorch DDP model on an rtd group registers `rt_dist.torch.ddp_hook` at its first "
        "forward with gradients where nothing registered a comm hook by then, so that an "
        "unchanged DDP script reduces its buckets where they lie (docs/torch.md); 0: DDP's own "
        "path (each bucket staged); the Python backend only; read when `import torch` registers "
        "the backend", ("0", "1")),
    Var("RTD_TORCH_FSDP_COMMS", "1", "0/1", "rt_dist.torch",
        "1: `torch.distributed.fsdp.fully_shard` sets `rt_dist.torch.fsdp_comms`'s hooks on each "
        "module it shards onto an rtd group, so that an unchanged FSDP2 script gets the lent "
        "buffers (docs/torch.md); 0: only a script's own `fsdp_comms` call sets them; the Python "
        "backend only; read when `import torch` registers the backend", ("0", "1")),
    Var("RTD_TORCH_FSDP_LAND", "1", "0/1", "rt_dist.torch",
        "`rt_dist.torch.fsdp_comms` (docs/torch.md): 1 lands each FSDP2 all-gather in the unit's "
        "unsharded parameters (no copy-out), 0 gathers in FSDP2's buffer; read when "
        "`fsdp_comms` (or `fully_shard`, `RTD_TORCH_FSDP_COMMS`) sets the hooks; an argument "
        "`land=` overrides it", ("0", "1")),
    Var("RTD_TORCH_FSDP_PARK", "1", "0/1", "rt_dist.torch",
        "`rt_dist.torch.fsdp_comms` (docs/torch.md): 1 gives the buffers lent to FSDP2 back to "
        "torch's caching allocator at the end of the root's forward and of the backward (taken "
        "again, most often at the same place, at their next use), 0 holds them all step; read "
        "when the hooks are set; an argument `park=` overrides it", ("0", "1")),
    Var("RTD_TORCH_GEMM_SM_CARVEOUT", "", "count of SMs", "rt_dist.torch",
        "N: every PyTorch GEMM of the process goes by cuBLASLt leaving N SMs free (PyTorch's "
        "experimental carveout) for the kernels beside it; FSDP2 with `fsdp_comms` gains, one "
        "GPU, nccl and DDP lose (docs/torch.md, 411ccc3:docs/benchmarks.md); read when `import "
        "torch` registers the backend"),
    Var("RTD_TORCH_DEFAULT", "0", "0/1", "rt_dist.torch",
        "1: the rtd backend is torch.distributed's default for CPU and CUDA tensors, so scripts "
        "that name no backend run on it (docs/torch.md); read when `import torch` registers the "
        "backend", ("0", "1")),
    Var("LOCAL_WORLD_SIZE", "", "count", "rt_dist.torch",
        "the workers of this node: `HostAdamW` divides this process's cores among them"),
    Var("DTRUN_SPARE_FD", "", "file descriptor", "rt_dist.spare",
        "set by dtrun in a spare worker (`--spare-workers`, docs/recovery.md): its socket to "
        "dtrun, on which it waits to be told whose worker it becomes"),
    Var("RTD_SPARE_IMPORTS", "", "module names", "rt_dist.spare",
        "a spare worker (`dtrun --spare-workers`) imports these modules (comma-separated) "
        "ahead of need, besides torch and rt_dist.torch, which it always tries; a module that "
        "fails to import ends the spare, saying why"),
)

_BY_NAME = {v.name: v for v in TABLE}


def _raw(name: str, default: str | None) -> tuple[Var, str]:
    var = _BY_NAME[name]  # a name not in TABLE is this package's bug
    value = os.environ.get(name, "")
    if value == "":
        value = var.default if default is None else default
    return var, value


def default(name: str) -> str:
    """The variable's default ("" when unset means absent)."""
    return _BY_NAME[name].default


def switch(name: str, default: str | None = None) -> bool:
    """A 0/1 variable (unset or empty: its default, or `default`)."""
    _, value = _raw(name, default)
    if value not in ("0", "1"):
        raise SettingError(f"{name}={value!r}: use 0 or 1")
    return value == "1"


def choice(name: str) -> str:
    """A variable that is one of a few words."""
    var, value = _raw(name, None)
    if value not in var.choices:
        raise SettingError(f"{name}={value!r}: use " + " or ".join(var.choices))
    return value


def count(name: str, most: int) -> int | None:
    """A whole number from 0 to `most`; None when unset."""
    _, value = _raw(name, None)
    if value == "":
        return None
    if not value.isdigit() or int(value) > most:
        raise SettingError(f"{name}={value!r}: use a whole number from 0 to {most}")
    return int(value)


def text(name: str) -> str:
    """A variable taken as it is ("" when unset)."""
    return _raw(name, None)[1]
