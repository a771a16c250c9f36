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

Each all-gather lands in the unit's unsharded parameters themselves
(RTD_TORCH_FSDP_LAND=0, or fsdp_comms(model, land=False), gathers in place
instead): FSDP2 would gather into its buffer and then copy every parameter
out of it on the compute stream (a read and a write of the whole unit before
its forward or backward may start); instead the parameters' memory is
allocated when the gather is issued, on FSDP2's all-gather stream, the copy
engines pull each peer's shards straight into it, and FSDP2's copy-out finds
nothing left to copy. A parameter's memory so allocated is freed a little
later than FSDP2 would free it (see _Landing), never past the end of the
root's forward or of the backward: at torch's peak the same memory as in
place (docs/torch.md). Only where every parameter of the unit is sharded on
its first dimension and gathered as its plain shard; anything else is
gathered as before.

The lent buffers are parked (given back to torch's caching allocator) where
FSDP2 needs none: at the end of the root's forward and of the backward, so
that the loss and the optimizer step, where a step's memory peaks, may use
them, as FSDP2 on nccl frees its own buffers there (RTD_TORCH_FSDP_PARK=0,
or fsdp_comms(model, park=False), holds them all step instead). The next
lend most often gets the same block back, and the peers' mapping holds; where
it does not, that buffer is set up afresh (see _shard_slots).
"""

import collections
import functools
import importlib.abc
import importlib.util
import math
import sys
import warnings
import weakref

import torch
import torch.distributed as dist

from rt_dist.torch._process_group import ProcessGroupRTD, _flag

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


class _AtBackwardEnd:
    """Runs fn at the end of the backward now running, once however often
    it is queued in that backward (an autograd callback)."""

    def __init__(self, fn):
        self.fn = fn
        self.task = None  # the backward whose end runs fn

    def queue(self):
        """Queues fn if a backward runs on this thread; whether one does."""
        task = torch._C._current_graph_task_id()
        if task == -1:
            return False
        if task != self.task:
            self.task = task
            torch.autograd.Variable._execution_engine.queue_callback(self._run)
        return True

    def _run(self):
        self.task = None
        self.fn()


class _Landing:
    """Gathers into a unit's unsharded parameters, and when their memory may go.

    FSDP2 allocates the parameters' memory on the compute stream at the
    copy-out and frees it at the reshard, so that the next unit reuses it in
    stream order. Allocated on the all-gather stream instead, a freed block
    could go to the next gather while the compute stream still reads it: so
    a landed parameter's free (free_unsharded_param, replaced on the
    parameter) only records an event on the stream that frees it and queues
    it; it is freed later, the stream it was allocated on first waiting for
    that event. When:
    - at a landing in the forward, all but the newest unit's (resharded just
      before: its forward is the one most likely still running, and waiting
      for it would hold this gather behind it);
    - at a landing or a free in the backward, all but the newest at a free,
      all at a landing (the unit resharded last ran its backward before the
      one now starting, during which this gather runs);
    - at the end of the root module's forward (a forward hook), all, so that
      the last units' do not stay through the loss and into the backward;
    - at the end of the backward (an autograd callback), all, so that no
      parameter stays through the optimizer step.
    A queued parameter gathered again keeps its memory (its stream waits
    for its event first)."""

    def __init__(self):
        self.queued = collections.deque()  # (unit, fsdp_param, event, stream, free)
        self.at_end = _AtBackwardEnd(self.flush)  # the backward's end frees what is queued

    def free_later(self, unit, fsdp_param, free):
        stream = getattr(fsdp_param, "_rtd_land_stream", None)
        if stream is None:
            free()  # never landed, or host memory: no stream to outrun
            return
        event = torch.cuda.Event()
        event.record()  # on the stream that frees it (FSDP2's current one)
        self.queued.append((unit, fsdp_param, event, stream, free))
        if self.at_end.queue():  # in a backward, whose end frees what is left
            self.release(keep_newest=True)

    def flush(self):
        self.release(keep_newest=False)

    def claim(self, fsdp_params, stream):
        """fsdp_params are about to be written on stream (None: the stream
        that last read them): drops them from the queue, their memory kept,
        stream waiting for their last use."""
        mine = {id(p) for p in fsdp_params}
        kept = collections.deque()
        for entry in self.queued:
            if id(entry[1]) not in mine:
                kept.append(entry)
            elif stream is not None:
                stream.wait_event(entry[2])
        self.queued = kept

    def landing(self):
        """A gather is about to land: frees what may go (see the class)."""
        self.release(keep_newest=torch._C._current_graph_task_id() == -1)

    def release(self, keep_newest):
        """Frees what is queued (but the newest unit's if keep_newest), each
        block's stream waiting first for its last use."""
        if not self.queued:
            return
        newest = self.queued[-1][0] if keep_newest else None
        kept = collections.deque()
        for entry in self.queued:
            unit, _, event, stream, free = entry
            if unit == newest:
                kept.append(entry)
                continue
            stream.wait_event(event)
            free()
        self.queued = kept


_landing = _Landing()
_forward_hooked = weakref.WeakSet()
_parking = weakref.WeakSet()  # the groups whose lent buffers are parked


def _park_all():
    for pg in list(_parking):
        pg.park_shard_buffers()


# Queued at each reduce-scatter: runs after FSDP2's own end-of-backward
# callback, which lets go of the last reduce-scatter's input.
_park_after_backward = _AtBackwardEnd(_park_all)


def _forward_end(module, _args, _output):
    """A forward hook on every FSDP module that lands or parks: at the end of
    the root's forward (after FSDP2's own, which lets go of the last
    gather's buffer), frees the landed parameters (see _Landing) and parks
    the lent buffers."""
    if not getattr(module._get_fsdp_state(), "_is_root", False):
        return
    if _landing.queued:
        _landing.release(keep_newest=False)
    _park_all()


def _shares(fsdp_params, world, output):
    """Each parameter's (numel, dtype) of an all-gather's block when FSDP2
    gathers each as its plain shard, sharded on dim 0, filling output's
    blocks in order; else None."""
    shares = []
    for p in fsdp_params:
        try:
            if (p.fsdp_placement.dim != 0 or p.offload_to_cpu
                    or hasattr(p._sharded_local_tensor, "fsdp_pre_all_gather")):
                return None
            numel = p._sharded_param_data.numel()
            dtype = p.param_dtype if p.param_dtype is not None else p._sharded_param_data.dtype
        except AttributeError:  # another FSDP2 than the one this was written for
            return None
        shares.append((numel, dtype))
    if (not shares or any(d != output.dtype for _, d in shares)
            or sum(n for n, _ in shares) * world != output.numel()):
        return None
    return shares


def _land(pg, module, output):
    """Gathers output's blocks into module's unsharded parameters (see
    _Landing); its Work, or None where this unit is gathered in place."""
    group = _param_group(module) if module is not None else None
    params = group.fsdp_params if group is not None else None
    shares = _shares(params, pg.size(), output) if params else None
    if shares is None or not pg.can_gather_blocks(output):
        return None
    stream = torch.cuda.current_stream(output.device) if output.is_cuda else None
    _landing.claim(params, stream)
    _landing.landing()
    for p in params:  # before any memory of theirs is allocated on this stream
        p._rtd_land_stream = stream
        if "free_unsharded_param" not in vars(p):
            p.free_unsharded_param = functools.partial(_landing.free_later, id(group), p,
                                                       p.free_unsharded_param)
    outs = []
    for p, (numel, dtype) in zip(params, shares, strict=True):
        p.init_all_gather_outputs([numel], [dtype], pg.size(), output.device)
        p.alloc_all_gather_outputs()
        out = p.all_gather_outputs
        if len(out) != 1 or out[0].numel() != numel * pg.size() or out[0].dtype != dtype:
            return None
        outs.append(out[0])
    work = pg.gather_blocks(output, outs)
    if work is not None:
        for p in params:
            p._rtd_landed = output.data_ptr()
    return work


def _copy_out(original):
    """FSDP2's foreach_all_gather_copy_out, skipping the copy where the
    gather landed in the parameters already (the waits stay)."""

    @functools.wraps(original)
    def copy_out(result, fsdp_params, group):
        output = result.all_gather_output
        landed = output.data_ptr()
        if not fsdp_params or not all(getattr(p, "_rtd_landed", None) == landed
                                      for p in fsdp_params):
            _landing.claim(fsdp_params, None)  # FSDP2 copies in place: the memory stays
            return original(result, fsdp_params, group)
        for p in fsdp_params:
            p._rtd_landed = None
        if result.all_gather_event is not None and output.is_cuda:
            torch.cuda.current_stream(output.device).wait_event(result.all_gather_event)
        if isinstance(result.all_gather_work, dist.Work):
            result.all_gather_work.wait()
        return None

    copy_out._rtd_lands = True
    return copy_out


def _install_copy_out():
    """Puts _copy_out in FSDP2's place (once); whether it could."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group as module
    except ImportError:
        return False
    original = getattr(module, "foreach_all_gather_copy_out", None)
    if original is None:
        return False
    if not getattr(original, "_rtd_lands", False):
        module.foreach_all_gather_copy_out = _copy_out(original)
    return True


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

        def __init__(self, pg, module, land):
            self._pg = pg
            self._module = weakref.ref(module)
            self._land = land

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
                if self._land:
                    work = _land(self._pg, self._module(), output_tensor)
                if work is None:
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
                if work is not None and self._pg in _parking:
                    _park_after_backward.queue()
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


def _install(module, land=None, park=None):
    """Sets the hooks on one FSDP module if its group is rtd; whether it did.
    land: gathers land in the parameters (None: RTD_TORCH_FSDP_LAND, default 1);
    park: the lent buffers are parked between steps (None:
    RTD_TORCH_FSDP_PARK, default 1)."""
    if not isinstance(module, FSDPModule):
        return False
    pg = _rtd(_shard_group(module))
    has_params = _param_group(module) is not None
    if pg is None and has_params:
        return False  # sharded on another backend: FSDP2's defaults
    if land is None:
        land = _flag("RTD_TORCH_FSDP_LAND")
    if park is None:
        park = _flag("RTD_TORCH_FSDP_PARK")
    if (land or park) and module not in _forward_hooked:  # the root, too, if it has no parameters
        module.register_forward_hook(_forward_end)
        _forward_hooked.add(module)
    if not has_params:
        return False
    if park:
        _parking.add(pg)
    else:
        _parking.discard(pg)
    land = land and _install_copy_out()
    module.set_custom_all_gather(RtdAllGather(pg, module, land))
    module.set_custom_reduce_scatter(RtdReduceScatter(pg))
    return True


def fsdp_comms(model: "torch.nn.Module", land: "bool | None" = None,
               park: "bool | None" = None) -> int:
    """Sets rtd's all-gather and reduce-scatter on every FSDP2 module of model
    whose group is rtd; returns how many modules got them. Call it after
    fully_shard and before the first step, on every rank. land=True gathers
    straight into the unsharded parameters (no copy out of FSDP2's buffer);
    False gathers in FSDP2's buffer, copied out by FSDP2; None reads
    RTD_TORCH_FSDP_LAND (default 1: land). park=True gives the lent buffers
    back to torch's allocator at the end of the forward and of the backward;
    False holds them all step; None reads RTD_TORCH_FSDP_PARK (default 1)."""
    why = _missing()
    if why:
        raise RuntimeError(f"rt_dist.torch.fsdp_comms: {why}; leave the call out: FSDP2 then "
                           "runs on rtd through its ordinary calls")
    return sum(_install(m, land, park) for m in model.modules())


def install_on_fully_shard(quiet=False):
    """RTD_TORCH_FSDP_COMMS=1: torch.distributed.fsdp.fully_shard sets the
    hooks on each module it shards onto an rtd group, so that an unchanged
    FSDP2 script gets them. FSDP2 takes most of a second to import, so this
    waits for its first import (rt_dist.torch runs this when `import torch`
    loads it, before any script's import of FSDP2) unless it is imported
    already. Returns why not, or None (FSDP2 not imported yet: its import
    warns, should this torch lack what the hooks need)."""
    if "torch.distributed.fsdp" in sys.modules:
        return _patch_fully_shard()
    if not any(isinstance(f, _AtFirstImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AtFirstImport("torch.distributed.fsdp", _patch_at_import))
    return None


def _patch_at_import():
    why = _patch_fully_shard()
    if why:
        warnings.warn(f"rt_dist: RTD_TORCH_FSDP_COMMS=1 ignored: {why}", stacklevel=2)


class _AtFirstImport(importlib.abc.MetaPathFinder):
    """Runs then() once the module `name` has been executed, at its first
    import, before the import statement returns it; then leaves the import
    system as it was."""

    def __init__(self, name, then):
        self.name = name
        self.then = then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; and the search below must not find us
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute, then = spec.loader.exec_module, self.then

        def exec_module(module):
            execute(module)
            then()

        spec.loader.exec_module = exec_module
        return spec


def _patch_fully_shard():
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
