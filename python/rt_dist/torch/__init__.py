"""The ``rtd`` backend of torch.distributed: librt_dist's collectives under
PyTorch's own DDP, FSDP2 and scripts.

    import rt_dist.torch              # or nothing: torch loads it (see below)
    torch.distributed.init_process_group("rtd")

CPU tensors go through Gloo, CUDA tensors through NCCL's kernels. With
RTD_TORCH_COPY_ENGINES=1, all-reduces, all-gathers and reduce-scatters of
1 MiB or more within a host go by copy engines where those measure faster:
each size's method is timed in its first calls and chosen alike on every
rank (RTD_CE_SITES overrides it). ``import torch`` registers the backend by
itself where this package's entry point is visible (dtrun puts it on the
workers' PYTHONPATH). With RTD_TORCH_DEFAULT=1, rtd is also torch.distributed's default backend for
CPU and CUDA tensors, so that a script that asks for the default
(``init_process_group()`` without a backend, or
``get_default_backend_for_device``) runs on rtd unchanged; with
RTD_TORCH_IMPL=python (the Python backend), RTD_TORCH_DDP_HOOK=1 (the
default), a DDP model on rtd registers ``ddp_hook``
at its first forward where the script registered no comm hook; with
RTD_TORCH_FSDP_COMMS=1 (the default there), ``fully_shard`` sets ``fsdp_comms``'s
hooks itself on modules it shards onto an rtd group, so that an unchanged
FSDP2 script gets them; with RTD_TORCH_GEMM_SM_CARVEOUT=N,
PyTorch's GEMMs (by cuBLASLt) leave N SMs free for the kernels the copy
engines' path still runs beside them (FSDP2's casts, the reductions' sums).
See docs/torch.md.
"""

import atexit
import datetime
import os
import sys
import types
import warnings

import torch
import torch.distributed as dist

from rt_dist import _config
from rt_dist.torch import _ddp_hook
from rt_dist.torch._ddp_hook import ddp_hook
from rt_dist.torch._failure_watch import CommunicatorFailed
from rt_dist.torch import _fsdp_comms
from rt_dist.torch._fsdp_comms import fsdp_comms
from rt_dist.torch._host_adamw import HostAdamW
from rt_dist.torch._process_group import ProcessGroupRTD

__all__ = ["CommunicatorFailed", "HostAdamW", "ProcessGroupRTD", "ddp_hook", "fsdp_comms",
           "register"]

BACKEND = "rtd"


# RTD_TORCH_IMPL: "cpp" (the default), the C++ backend (rt_dist.torch._C);
# "python", the earlier backend written in Python over ctypes, with its DDP
# and FSDP2 hooks for copy engines (kept until the C++ backend has them).
IMPLEMENTATIONS = ("cpp", "python")


# Settings with a value they cannot take, found at registration (inside
# `import torch`, which must not fail for them): each warns there and is
# taken as its default, and making an rtd group raises them all, as the
# C++ settings do (a clear error at start-up naming the variable).
_bad_settings: list[str] = []


def _bad_setting(message: str) -> None:
    if message not in _bad_settings:
        _bad_settings.append(message)
        warnings.warn(f"rt_dist: {message} (init_process_group('rtd') will refuse it)",
                      stacklevel=3)


def _impl() -> str:
    try:
        return _config.choice("RTD_TORCH_IMPL")
    except _config.SettingError as e:
        _bad_setting(str(e))
        return "cpp"


def _extension() -> types.ModuleType:
    """rt_dist.torch._C, or an ImportError that says how to get the right one."""
    try:
        from rt_dist import _capi  # finds and checks librt_dist
        from rt_dist.torch import _C

        _C.load(_capi.lib._name)
    except ImportError as e:
        raise ImportError(
            f"rt_dist: the rtd backend's extension (rt_dist.torch._C) cannot be loaded for torch "
            f"{torch.__version__}: {e}. It is built against one torch: build rt_dist with "
            "-DRTD_TORCH_PYTHON=<this python> (or `pip install ./python` in this environment); "
            "see docs/torch.md") from None
    built = _C.TORCH_VERSION.split("+")[0]
    if built != torch.__version__.split("+")[0]:
        warnings.warn(f"rt_dist: the rtd backend was built against torch {_C.TORCH_VERSION}, "
                      f"this is {torch.__version__}; rebuild it against this one if it fails",
                      stacklevel=2)
    return _C


def _exit_status() -> None:
    """At the interpreter's exit: a collective of the C++ backend that failed
    after its call returned, and that nothing raised (its Work dropped
    unwaited), is printed and fails the process, as the Python backend's
    failure watch does: a job must not end as a success without it."""
    unraised = sys.modules["rt_dist.torch._C"].unraised_failures()
    for message in unraised:
        print(f"rtd: {message} (found at exit: this process fails)", file=sys.stderr, flush=True)
    if unraised:
        sys.stdout.flush()
        os._exit(1)


def _create(store: dist.Store, rank: int, size: int,
            timeout: datetime.timedelta) -> dist.ProcessGroup:
    if _bad_settings:
        raise ValueError("rt_dist: " + "; ".join(_bad_settings))
    if _impl() == "python":
        return ProcessGroupRTD(store, rank, size, timeout)
    # Read here, when the group is made (the extension reads no variable).
    copy_engines = _config.switch("RTD_TORCH_COPY_ENGINES")
    high_priority = _config.choice("RTD_TORCH_STREAM_PRIORITY") == "high"
    group = _extension().ProcessGroupRTD(store, rank, size, timeout, copy_engines=copy_engines,
                                         high_priority_stream=high_priority)
    atexit.unregister(_exit_status)  # once, and after what the program registered before
    atexit.register(_exit_status)
    return group


# The torch this backend is tested with (docs/torch.md). On torch 2.4.1 its
# collectives pass their tests but DDP hangs: that torch's C++ side loses a
# Python Work's wait() once the Python object is freed.
TESTED = (2, 11)


def _version() -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        return TESTED


def register() -> None:
    """Registers the backend with torch.distributed (once; later calls do nothing)."""
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    if _version() < TESTED:
        warnings.warn(f"rt_dist: the rtd backend is tested with torch {TESTED[0]}.{TESTED[1]}; "
                      f"this is {torch.__version__} (on 2.4 DDP hangs; see docs/torch.md)",
                      stacklevel=2)
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
    if _switch("RTD_TORCH_DEFAULT"):
        for device in ("cpu", "cuda"):
            dist.Backend.default_device_backend_map[device] = BACKEND
    if _impl() == "cpp":
        return  # the C++ backend replaces nothing of torch's
    if _version() != TESTED:
        # The Python implementation replaces private names of torch, known
        # only on the torch it is tested with (on 2.15 its groups are not
        # even made): elsewhere it replaces nothing, and its groups refuse.
        _bad_setting(f"RTD_TORCH_IMPL=python needs torch {TESTED[0]}.{TESTED[1]}, whose private "
                     f"names it replaces; this is torch {torch.__version__}: unset RTD_TORCH_IMPL "
                     "for the C++ implementation")
        return
    if _switch("RTD_TORCH_DDP_HOOK"):
        _ddp_hook.install_on_ddp()
    _ddp_hook.install_ddp_support()
    if _switch("RTD_TORCH_FSDP_COMMS"):
        # Where this torch lacks what the hooks need, only a script that asked
        # for them is told (by default FSDP2 simply runs as it is).
        asked = _config.text("RTD_TORCH_FSDP_COMMS") == "1"
        why = _fsdp_comms.install_on_fully_shard(quiet=not asked)
        if why and asked:
            warnings.warn(f"rt_dist: RTD_TORCH_FSDP_COMMS=1 ignored: {why}", stacklevel=2)
    try:
        _gemm_carveout(_config.count("RTD_TORCH_GEMM_SM_CARVEOUT", 1024))
    except _config.SettingError as e:
        _bad_setting(f"{e} (a count of SMs)")


def _switch(name: str) -> bool:
    """A 0/1 setting read at registration (another value: _bad_setting)."""
    try:
        return _config.switch(name)
    except _config.SettingError as e:
        _bad_setting(str(e))
        return _config.default(name) == "1"


def _gemm_carveout(value: int | None) -> None:
    """RTD_TORCH_GEMM_SM_CARVEOUT=N: PyTorch's own (experimental) knob, for
    every GEMM of the process. A GEMM on Hopper holds every SM until it
    ends; kernels of other streams then wait for it (measured in
    411ccc3:docs/benchmarks.md: FSDP2 on rtd gains, on nccl it loses)."""
    if value is None:
        return
    try:
        torch.backends.cuda.preferred_blas_library("cublaslt")  # the carveout is cuBLASLt's
        torch._C._set_sm_carveout_experimental(value)
    except (AttributeError, RuntimeError) as e:
        warnings.warn(f"rt_dist: RTD_TORCH_GEMM_SM_CARVEOUT ignored: this torch cannot ({e})",
                      stacklevel=2)


register()
