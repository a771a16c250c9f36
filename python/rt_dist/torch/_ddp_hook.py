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
alike; each is then set up again. Whether to set a bucket up is decided
alike on every rank (the set-up is collective): by the model and DDP's
rebuilds, not by the buffer's address, which is each rank's own (a new
model's bucket may land where an old one lay on one rank and not on the
other). On a group that is not rtd the hook is
PyTorch's allreduce_hook, so a script may register it whatever its backend.

RTD_TORCH_DDP_HOOK=1 (the default) registers it by itself (install_on_ddp):
at the first forward with gradients of a DDP model on an rtd group, where
nothing else registered a hook by then, so that an unchanged DDP script gets
it; under DDP's join() that hook divides as DDP would (auto_ddp_hook).
Whatever that setting, DDP's join(divide_by_initial_world_size=False) on rtd
never waits for ever, and ddp_hook registered by the script follows join()
too (install_ddp_support).
"""

import itertools
import weakref

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel

from rt_dist.torch._process_group import ProcessGroupRTD


def _first(fut):
    return fut.value()[0]


# Real annotations, not strings: DDP's register_comm_hook checks them.
def ddp_hook(state: object, bucket: dist.GradBucket,
             owner: object = None) -> torch.futures.Future[torch.Tensor]:
    """A DDP comm hook (register_comm_hook(group or None, ddp_hook)).
    owner: see ProcessGroupRTD.bucket_allreduce (registered as above, it is
    the model's: the registration passes it through auto_ddp_hook)."""
    group = state if state is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(group, ProcessGroupRTD):
        return default_hooks.allreduce_hook(state, bucket)
    work = group.bucket_allreduce(bucket.index(), bucket.buffer(), owner=owner)
    return work.get_future().then(_first)


_models = itertools.count()  # DDP models given a hook, in order: alike on every rank


class _Auto:
    """The state of auto_ddp_hook: the group, the model (weakly), whose join()
    it must follow, whether rtd registered it by itself (not the script), and
    what identifies its buckets alike on every rank (owner())."""

    def __init__(self, ddp, group, by_itself):
        self.group = group
        self.ddp = weakref.ref(ddp)
        self.by_itself = by_itself
        self.model = next(_models)
        self.generation = 0
        self.rebuilt = None

    def owner(self, ddp):
        """(model, generation): the generation counts DDP's bucket rebuilds,
        which every rank makes at the same step (DDP's _has_rebuilt_buckets
        turns on then, and off when DDP's group is replaced)."""
        rebuilt = getattr(ddp, "_has_rebuilt_buckets", None)
        if rebuilt != self.rebuilt:
            self.rebuilt = rebuilt
            self.generation += 1
        return (self.model, self.generation)


def auto_ddp_hook(state, bucket):
    """ddp_hook, except under DDP's join(): a rank that joined reduces zeros
    in a new tensor at each call, which no bucket set up once can take, so
    every rank then averages through allreduce. Registered by rtd itself
    (standing for DDP without a hook), it divides as DDP would: by the world
    size (join's default, divide_by_initial_world_size=True) or by the ranks
    that have not joined; registered by the script, by the world size, as
    ddp_hook on any group (PyTorch's allreduce_hook)."""
    ddp = state.ddp()
    if ddp is None:
        return ddp_hook(state.group, bucket)
    if not ddp._join_config.enable:
        return ddp_hook(state.group, bucket, state.owner(ddp))
    # Registered by the script, it is a hook as ddp_hook is on any group:
    # the average over the world size, as PyTorch's allreduce_hook.
    if getattr(ddp, "_divide_by_initial_world_size", True) or not state.by_itself:
        return default_hooks.allreduce_hook(state.group, bucket)
    t = bucket.buffer()
    t.div_(_ranks_training(ddp))
    return state.group.allreduce([t]).get_future().then(_first)


def _ranks_training(ddp):
    """How many ranks run this step's forward: the sum of join's notice in
    it, which _notify_join_context kept (on a rank that joined, one of its
    last forward: its buckets are zeros). Without a notice (DDP not the
    first of join's joinables) DDP divides by the world size, and so this."""
    notice = getattr(ddp, "_rtd_join_notice", None)
    if notice is None:
        return ddp.process_group.size()
    if isinstance(notice, dist.Work):
        notice = ddp._rtd_join_notice = max(1, int(notice.result()[0].item()))
    return notice


def _notify_join_context(joinable):
    """Join.notify_join_context, for a DDP model on rtd under
    join(divide_by_initial_world_size=False). DDP hands the notice's Work to
    its C++ reducer, which waits on it and reads its result to divide by;
    a Work of a process group written in Python gives neither to C++ (the
    wait never ends). So DDP gets no Work, and with a comm hook it needs
    none (DDP leaves the division to the hook): rtd's own hook divides by
    the notice itself, a script's hook as it likes; without a hook the step
    is refused, on every rank at its first forward under join()."""
    work = _original_notify(joinable)
    ddp = joinable  # the joinable that asks, if it is a DDP model
    if (work is None or not isinstance(ddp, DistributedDataParallel)
            or not isinstance(ddp.process_group, ProcessGroupRTD)
            or getattr(ddp, "_divide_by_initial_world_size", True)):
        return work
    if any(hook is auto_ddp_hook and state.by_itself for hook, state in ddp._comm_hooks):
        ddp._rtd_join_notice = work
    elif not _registered(ddp):
        work.wait()
        raise RuntimeError(
            "rt_dist: DDP.join(divide_by_initial_world_size=False) on rtd without a comm hook: "
            "DDP's C++ reducer cannot wait on a Work of a process group written in Python. "
            "Leave RTD_TORCH_DDP_HOOK at 1 (rtd's own hook divides as DDP would), or use "
            "divide_by_initial_world_size=True")
    return None


_original_notify = Join.notify_join_context


def _registered(ddp):
    """Whether a comm hook (Python's or a built-in one) is registered."""
    if ddp._comm_hooks:
        return True
    try:
        return bool(ddp._get_ddp_logging_data().get("comm_hook"))
    except (AttributeError, RuntimeError):
        return False


def _at_first_forward(ddp, args):
    """A forward pre-hook of the DDP model, run once, at its first forward
    with gradients (an evaluation before training may come first): registers
    auto_ddp_hook where the script registered none and DDP can take one."""
    if not torch.is_grad_enabled():
        return None
    for key, hook in list(ddp._forward_pre_hooks.items()):
        if hook is _at_first_forward:
            del ddp._forward_pre_hooks[key]
    if _registered(ddp) or ddp._use_python_reducer or ddp._delay_all_reduce_all_params:
        return None
    ddp.register_comm_hook(_Auto(ddp, ddp.process_group, True), auto_ddp_hook)
    return None


def install_ddp_support():
    """Whatever RTD_TORCH_DDP_HOOK: DDP under join(divide_by_initial_world_size
    =False) on rtd (_notify_join_context), and a script's own registration
    of ddp_hook made to follow join() as the one rtd registers does
    (_registration). Once per process."""
    if getattr(Join.notify_join_context, "_rtd_installs", False):
        return
    _wraps(_notify_join_context, _original_notify)
    Join.notify_join_context = staticmethod(_notify_join_context)
    for name in ("register_comm_hook", "_register_builtin_comm_hook"):
        setattr(DistributedDataParallel, name, _registration(
            getattr(DistributedDataParallel, name)))


def install_on_ddp():
    """RTD_TORCH_DDP_HOOK=1: each DistributedDataParallel on an rtd group
    registers auto_ddp_hook at its first forward unless a hook was
    registered by then (a script's own, DDP's mixed precision or fused
    optimizer, a built-in one). Once per process."""
    original = DistributedDataParallel.__init__
    if getattr(original, "_rtd_installs", False):
        return

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if isinstance(getattr(self, "process_group", None), ProcessGroupRTD):
            self.register_forward_pre_hook(_at_first_forward)

    _wraps(__init__, original)
    DistributedDataParallel.__init__ = __init__


def _wraps(wrapper, original):
    wrapper.__doc__ = original.__doc__
    wrapper.__name__ = original.__name__
    wrapper.__wrapped__ = original
    wrapper._rtd_installs = True


def _registration(register):
    """DDP's register_comm_hook (or its built-in form), where DDP takes one
    hook: one registered after rtd registered its own by itself is refused
    (as DDP refuses a second), saying what to do; ddp_hook registered by the
    script on an rtd model becomes auto_ddp_hook on the group it names (the
    same reductions, and join() followed: under join() a rank that joined
    reduces zeros in a new tensor at each call, which ddp_hook would set up
    as a new bucket on that rank alone, waiting for ever)."""

    def wrapper(self, *args, **kwargs):
        if any(hook is auto_ddp_hook and state.by_itself for hook, state in self._comm_hooks):
            raise RuntimeError(
                f"rt_dist: {register.__name__}: this DDP model has rtd's bucket hook already, "
                "registered by itself at the first forward (RTD_TORCH_DDP_HOOK=1), and DDP takes "
                "one hook: register yours before the first forward, or set RTD_TORCH_DDP_HOOK=0")
        if register.__name__ == "register_comm_hook" and len(args) + len(kwargs) == 2:
            state = kwargs["state"] if "state" in kwargs else args[0]
            hook = kwargs["hook"] if "hook" in kwargs else args[-1]
            group = state if state is not None else dist.distributed_c10d._get_default_group()
            # The group the hook reduces on decides, not the model's: a model
            # on another backend may name an rtd group (None: the default one).
            if hook is ddp_hook and isinstance(group, ProcessGroupRTD):
                return register(self, _Auto(self, group, False), auto_ddp_hook)
        return register(self, *args, **kwargs)

    _wraps(wrapper, register)
    return wrapper
