"""HostAdamW: librt_dist's host AdamW as a ``torch.optim.Optimizer``.

For parameters in host memory: FSDP2 with ``CPUOffloadPolicy`` (the shards
are CPU DTensors; their local tensors are stepped), or any CPU model. The
step is the one rtd::FSDP's offload runs (AVX-512 or AVX2 where the CPU has
them, a team of threads kept across steps, denormals treated as zero), equal
to ``torch.optim.AdamW`` (``amsgrad=False``) to float32 rounding. Its state
has AdamW's names and types (``step``, ``exp_avg``, ``exp_avg_sq``), so
``state_dict()`` loads into ``torch.optim.AdamW`` and back, and
torch.distributed.checkpoint saves it as it saves AdamW's.

    opt = rt_dist.torch.HostAdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Optional

import torch
from torch.distributed.tensor import DTensor  # a DTensor's local shard is what is stepped
from torch.optim import Optimizer

from rt_dist import _config

_GRAD_DTYPES = {torch.float32: 0, torch.bfloat16: 4}  # RTD_FLOAT32, RTD_BFLOAT16


def default_threads() -> int:
    """The cores this process may run on, shared among the node's ranks."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ranks = _config.count("LOCAL_WORLD_SIZE", 1 << 20) or 1  # set by dtrun and torchrun
    return max(1, (cores or 1) // max(1, ranks))


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


class HostAdamW(Optimizer):
    """AdamW stepped by librt_dist on the host (see the module's docstring).

    ``threads``: the host threads of the step (default: this process's cores
    divided by LOCAL_WORLD_SIZE). Parameters must be float32 in host memory;
    gradients float32 or bfloat16. ``amsgrad`` and the fused, foreach and
    capturable forms are not offered. ``in_backward=True`` (FSDP2 only):
    each parameter is stepped as soon as its reduced gradient is in host
    memory, while backward goes on; ``step()`` then waits for those steps
    (no gradient clipping or inspection between backward and ``step()``).
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, *, maximize: bool = False,
                 amsgrad: bool = False, threads: Optional[int] = None,
                 in_backward: bool = False) -> None:
        if amsgrad:
            raise ValueError("HostAdamW: amsgrad is not offered; use torch.optim.AdamW")
        if not 0.0 <= float(lr):
            raise ValueError(f"HostAdamW: invalid learning rate {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"HostAdamW: invalid eps {eps}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"HostAdamW: invalid betas {betas}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"HostAdamW: invalid weight_decay {weight_decay}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        maximize=maximize, amsgrad=False)
        super().__init__(params, defaults)
        from rt_dist import _capi  # loads librt_dist

        self._capi = _capi
        self.threads = default_threads() if threads is None else int(threads)
        self._handle = _capi.lib.rtd_host_adamw_create(self.threads)
        if not self._handle:
            raise _capi.last_error()
        self._in_backward = _InBackward(self) if in_backward else None
        self.stepped_in_backward = 0  # of the last step() (in_backward=True)

    @property
    def kernel(self) -> str:
        """The kernel the step runs: "avx512", "avx2" or "scalar"."""
        return self._capi.lib.rtd_host_adamw_kernel(self._handle).decode()

    def __del__(self) -> None:
        self.close()
        handle = getattr(self, "_handle", None)
        if handle:
            self._capi.lib.rtd_host_adamw_destroy(handle)
            self._handle = None

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        if getattr(self, "_in_backward", None) is not None:
            self._in_backward.add_params([self.param_groups[-1]])

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)  # makes new group dicts
        if getattr(self, "_in_backward", None) is not None:
            self._in_backward.add_params(self.param_groups)

    def close(self) -> None:
        """Removes the hooks of in_backward=True (also done when the
        optimizer is dropped)."""
        if getattr(self, "_in_backward", None) is not None:
            self._in_backward.close()
            self._in_backward = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:  # a state dict of torch.optim.AdamW's
            group.setdefault("maximize", False)
            if group.get("amsgrad", False):
                raise ValueError("HostAdamW: the state has amsgrad=True, which is not offered")

    def _tensor_of(self, p: torch.Tensor, group: dict[str, Any], keep: list,
                   steps: list) -> Any:
        param, grad = _local(p), _local(p.grad)
        if param.device.type != "cpu" or param.dtype != torch.float32:
            raise ValueError(f"HostAdamW: parameters must be float32 in host memory, not "
                             f"{param.dtype} on {param.device} (FSDP2: CPUOffloadPolicy)")
        if not param.is_contiguous():
            raise ValueError("HostAdamW: a parameter is not contiguous")
        if grad.is_sparse:
            raise ValueError("HostAdamW: sparse gradients are not offered")
        if grad.dtype not in _GRAD_DTYPES or grad.device.type != "cpu":
            raise ValueError(f"HostAdamW: gradients must be float32 or bfloat16 in host "
                             f"memory, not {grad.dtype} on {grad.device}")
        if grad.shape != param.shape:
            raise ValueError(f"HostAdamW: a gradient of shape {tuple(grad.shape)} for a "
                             f"parameter of shape {tuple(param.shape)}")
        grad = grad.contiguous()
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        m, v = _local(state["exp_avg"]), _local(state["exp_avg_sq"])
        for name, t in (("exp_avg", m), ("exp_avg_sq", v)):
            if t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous() \
                    or t.shape != param.shape:
                raise ValueError(f"HostAdamW: the state's {name} is not a contiguous float32 "
                                 f"host tensor of the parameter's shape")
        keep.append(grad)
        steps.append(state["step"])
        beta1, beta2 = group["betas"]
        return self._capi.AdamWTensor(
            param.data_ptr(), grad.data_ptr(), _GRAD_DTYPES[grad.dtype], m.data_ptr(),
            v.data_ptr(), param.numel(), int(state["step"].item()) + 1, float(group["lr"]),
            float(beta1), float(beta2), float(group["eps"]), float(group["weight_decay"]),
            -1.0 if group["maximize"] else 1.0)

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        stepped: set = set()
        if self._in_backward is not None:
            stepped = self._in_backward.finish()  # raises what a step in backward raised
            self.stepped_in_backward = len(stepped)
        self._step_params([(p, group) for group in self.param_groups for p in group["params"]
                           if p.grad is not None and p not in stepped])
        return loss

    def _step_params(self, todo: list) -> None:
        """Steps each (parameter, its group) in one call of the library."""
        keep: list = []  # the gradients' contiguous copies, alive for the call
        steps: list = []  # each tensor's step counter, advanced once all are stepped
        tensors = [self._tensor_of(p, group, keep, steps) for p, group in todo]
        if tensors:
            array = (self._capi.AdamWTensor * len(tensors))(*tensors)
            if self._capi.lib.rtd_host_adamw_step(self._handle, array, len(tensors)) != 0:
                raise self._capi.last_error()
        for step in steps:
            step.add_(1)


class _InBackward:
    """HostAdamW(in_backward=True): each FSDP2 parameter stepped on a thread
    of its own as soon as its reduced gradient has landed in host memory,
    while backward goes on.

    FSDP2 (torch 2.11) calls a sharded parameter's post-accumulate-grad hooks
    right after it sets the reduced gradient, whose copy to the host is then
    still queued on the GPU (non-blocking, into pinned memory). The hook
    records an event after that copy on the current stream (FSDP2's
    post-reduce stream) and hands the parameter to the thread, which waits
    for the event, then steps it (the library's call releases the GIL).
    step() waits for the thread and steps whatever it did not.

    The hooks and the thread hold this object and the optimizer weakly: an
    optimizer dropped (or closed) steps nothing more.
    """

    def __init__(self, opt: HostAdamW) -> None:
        self._opt = weakref.ref(opt)
        self._group_of: dict = {}
        self._hooks: list = []
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Condition()
        self._pending = 0
        self._stepped: set = set()
        self._seen: set = set()  # queued since the last step()
        self._error: Optional[BaseException] = None
        self.add_params(opt.param_groups)
        threading.Thread(target=_InBackward._run, args=(self._queue, weakref.ref(self)),
                         name="HostAdamW", daemon=True).start()

    def add_params(self, groups: list) -> None:
        """Hooks on the groups' parameters not hooked yet (and their groups)."""
        me = weakref.ref(self)

        def landed(p: torch.Tensor) -> None:
            target = me()
            if target is not None:
                target._landed(p)

        for group in groups:
            for p in group["params"]:
                if not isinstance(p, DTensor):
                    raise ValueError(
                        "HostAdamW(in_backward=True) steps FSDP2's sharded parameters only: "
                        "elsewhere a gradient's hook runs before its reduction (DDP) is done")
                if p not in self._group_of:
                    self._hooks.append(p.register_post_accumulate_grad_hook(landed))
                self._group_of[p] = group

    def _landed(self, p: torch.Tensor) -> None:
        with self._done:
            if p in self._seen:  # a second backward with gradient sync before step()
                self._error = self._error or RuntimeError(
                    "HostAdamW(in_backward=True): a parameter's reduced gradient landed twice "
                    "before step(): one backward with gradient sync per step (accumulate with "
                    "set_requires_gradient_sync(False) on the micro-steps before the last)")
                return
            self._seen.add(p)
            self._pending += 1
        event = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            event = torch.cuda.Event()
            event.record()  # after the gradient's copy to the host on this stream
        self._queue.put((p, event))

    @staticmethod
    def _run(jobs: Any, me: Any) -> None:
        while True:
            item = jobs.get()
            target = me() if item is not None else None
            if target is None:
                return
            target._step(*item)
            del target

    def _step(self, p: torch.Tensor, event: Any) -> None:
        try:
            while event is not None and not event.query():
                time.sleep(0.0002)  # polled: waiting on the event would hold the GIL
            opt = self._opt()
            if opt is not None:
                with torch.no_grad():
                    opt._step_params([(p, self._group_of[p])])
        except BaseException as e:  # raised by step()
            self._error = self._error or e
        with self._done:
            self._pending -= 1
            self._stepped.add(p)
            self._done.notify_all()

    def finish(self) -> set:
        """Waits for the steps queued in backward; the parameters they stepped."""
        with self._done:
            self._done.wait_for(lambda: self._pending == 0)
            stepped, self._stepped = self._stepped, set()
            self._seen = set()
        error, self._error = self._error, None
        if error is not None:
            raise error
        return stepped

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._queue.put(None)
