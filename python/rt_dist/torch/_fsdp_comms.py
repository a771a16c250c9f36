"""fsdp_comms: FSDP2's all-gathers and reduce-scatters out of buffers the
peers mapped once.

    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    rt_dist.torch.fsdp_comms(model)   # after fully_shard, before the first step

FSDP2 allocates each all-gather's output (each rank's input is its block of
it) and each reduce-scatter's input afresh, so on rtd they are new to the
group at every call: within a host, rtd stages them through buffers its peers
mapped once (a copy of every reduce-scatter input, of every all-gather
input). This installs FSDP2's own hooks for custom collectives
(FSDPModule.set_custom_all_gather / set_custom_reduce_scatter) on every FSDP
module whose group is rtd: their allocate() lends FSDP2 the group's mapped
buffers (see _shard_slots), FSDP2 copies its shards and gradients straight
into them, and copy engines read them there. Same results, no staging copy.
On a group that is not rtd, a module keeps FSDP2's defaults.
"""

import functools
import math
import sys
import weakref

import torch
import torch.distributed as dist

from rt_dist.torch._process_group import ProcessGroupRTD

# FSDP2 is imported at the first fsdp_comms() call, not with this module:
# rt_dist.torch is imported by `import torch` itself (the entry point), and
# torch.distributed.fsdp takes most of a second to import.
FSDPModule = AllGather = ReduceScatter = None
RtdAllGather = RtdReduceScatter = None


def _rtd(group):
    """The ProcessGroupRTD behind group, or None."""
    if isinstance(group, ProcessGroupRTD):
        return group
    return None


def _plain(size, dtype, device):
    return torch.empty(*size, dtype=dtype, device=device)


def _lend(pg, kind, size, dtype, device, reclaim=None):
    numel = math.prod(int(s) for s in size)
    t = pg.lend_shard_buffer(kind, numel, dtype, device, reclaim)
    return t.view(*size) if t is not None else _plain(size, dtype, device)


def _finish(work, async_op):
    # FSDP2 tells a synchronous call by its returning None.
    if async_op:
        return work
    work.wait()
    return None


def _load_fsdp():
    """Imports FSDP2's interfaces and defines the hooks on them (once)."""
    global FSDPModule, AllGather, ReduceScatter, RtdAllGather, RtdReduceScatter
    if RtdAllGather is not None:
        return
    try:
        from torch.distributed.fsdp import FSDPModule as module_type
        from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as ag_base
        from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as rs_base
    except ImportError:  # torch without FSDP2's custom collectives
        return
    FSDPModule, AllGather, ReduceScatter = module_type, ag_base, rs_base

    class _AllGather(AllGather):
        """FSDP2's all-gather on an rtd group, in place in a lent output."""

        def __init__(self, pg, module):
            self._pg = pg
            self._module = weakref.ref(module)

        def allocate(self, size, *, dtype, device):
            return _lend(self._pg, "all_gather", size, dtype, device, self._reclaim)

        def _reclaim(self, buffer, holders):
            """Whether a busy buffer may be lent again: FSDP2's forward holds
            the previous all-gather's output alone (AllGatherState) until this
            one's copy-out, but reads it no more after its own copy-out, whose
            event it keeps; the current stream (this call's copy-in, which
            the all-gather follows) waits for that event. Relies on FSDP2's
            internals: whatever does not look as expected answers no (a second
            buffer is then lent)."""
            try:
                state = _param_group(self._module()).comm_ctx.all_gather_state
                if state is None or holders != 1:
                    return False
                if state.all_gather_result.all_gather_output.data_ptr() != buffer.data_ptr():
                    return False
                event = state.event
            except (AttributeError, TypeError):
                return False
            if buffer.is_cuda:
                if event is None:
                    return False
                torch.cuda.current_stream(buffer.device).wait_event(event)
            return True

        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            work = None
            if _rtd(group) is self._pg:
                work = self._pg.shard_collective("all_gather", output_tensor, input_tensor)
            if work is None:
                return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group,
                                                   async_op=async_op)
            return _finish(work, async_op)

    class _ReduceScatter(ReduceScatter):
        """FSDP2's reduce-scatter on an rtd group, out of a lent input.

        FSDP2 allocates the input, then the output (which becomes the
        gradients: it must stay torch's), then calls."""

        def __init__(self, pg):
            self._pg = pg
            self._input_next = True

        def allocate(self, size, *, dtype, device):
            is_input, self._input_next = self._input_next, not self._input_next
            if is_input:
                return _lend(self._pg, "reduce_scatter", size, dtype, device)
            return _plain(size, dtype, device)

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            self._input_next = True
            work = None
            if _rtd(group) is self._pg:
                work = self._pg.shard_collective("reduce_scatter", output_tensor, input_tensor, op)
            if work is None:
                return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group,
                                                  async_op=async_op)
            return _finish(work, async_op)

    RtdAllGather, RtdReduceScatter = _AllGather, _ReduceScatter


def _param_group(module):
    """FSDP2's state of a module's parameters (FSDPParamGroup), or None."""
    return module._get_fsdp_state()._fsdp_param_group


def _shard_group(module):
    """The group a module's FSDP2 shards over, or None (no parameters, or not sharded)."""
    param_group = _param_group(module)
    if param_group is None:
        return None
    try:
        return param_group.mesh_info.shard_process_group
    except AttributeError:  # replicated (DDP-like), not sharded
        return None


def _missing():
    """Why this torch cannot lend FSDP2 buffers, or None."""
    _load_fsdp()
    if (AllGather is None or not hasattr(FSDPModule, "set_custom_all_gather")
            or not hasattr(torch._C, "_storage_Use_Count")):  # how a lent buffer is seen free
        return (f"torch {torch.__version__} lacks what it needs (FSDP2's custom collectives, "
                "FSDPModule.set_custom_all_gather, since torch 2.9, and "
                "torch._C._storage_Use_Count; 2.11 is tested)")
    return None


def _install(module):
    """Sets the hooks on one FSDP module if its group is rtd; whether it did."""
    if not isinstance(module, FSDPModule):
        return False
    pg = _rtd(_shard_group(module))
    if pg is None:
        return False
    module.set_custom_all_gather(RtdAllGather(pg, module))
    module.set_custom_reduce_scatter(RtdReduceScatter(pg))
    return True


def fsdp_comms(model):
    """Sets rtd's all-gather and reduce-scatter on every FSDP2 module of model
    whose group is rtd; returns how many modules got them. Call it after
    fully_shard and before the first step, on every rank."""
    why = _missing()
    if why:
        raise RuntimeError(f"rt_dist.torch.fsdp_comms: {why}; leave the call out: FSDP2 then "
                           "runs on rtd through its ordinary calls")
    return sum(_install(m) for m in model.modules())


def install_on_fully_shard():
    """RTD_TORCH_FSDP_COMMS=1: torch.distributed.fsdp.fully_shard sets the
    hooks on each module it shards onto an rtd group, so that an unchanged
    FSDP2 script gets them. Takes effect for the names a script imports after
    it (rt_dist.torch runs it when `import torch` loads it). Returns why not,
    or None."""
    why = _missing()
    if why:
        return why
    import torch.distributed.fsdp as package

    original = package.fully_shard
    if getattr(original, "_rtd_installs", False):
        return None

    @functools.wraps(original)
    def fully_shard(module, *args, **kwargs):
        out = original(module, *args, **kwargs)
        for m in out if isinstance(out, (list, tuple)) else [out]:
            _install(m)
        return out

    fully_shard._rtd_installs = True
    package.fully_shard = fully_shard
    composable = sys.modules.get("torch.distributed._composable.fsdp")
    if composable is not None and getattr(composable, "fully_shard", None) is original:
        composable.fully_shard = fully_shard
    return None
