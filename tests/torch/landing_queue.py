"""When fsdp_comms frees a landed parameter's memory (rt_dist.torch._fsdp_comms
._Landing), on CPU with stand-ins for CUDA's events and streams: on GPUs the
parameters' memory was allocated on the all-gather stream, so each free
waits (that stream waiting for the parameter's last use) until it may not
hold the next gather behind the compute; on CPU nothing is queued at all.
Checks the policy its docstring states:
- in the forward, a landing frees all but the newest unit's parameters;
- the end of the root's forward and of the backward free all;
- in the backward, a free frees all but the newest, a landing all;
- a queued parameter gathered again keeps its memory, and its new stream
  waits for its last use;
- every free is preceded by its own stream's wait for its own event.
    dtrun --nproc-per-node=1 python tests/torch/landing_queue.py
"""

import torch

from rt_dist.torch import _fsdp_comms


class Event:
    def __init__(self):
        self.name = None

    def record(self, stream=None):
        pass


class Stream:
    def __init__(self, name):
        self.name, self.waited = name, []

    def wait_event(self, event):
        self.waited.append(event.name)


class Param:
    """An FSDPParam as _Landing sees it: landed on a stream."""

    def __init__(self, name, stream, freed):
        self.name, self._rtd_land_stream = name, stream
        self.freed = freed

    def free(self):
        # The block goes back to its stream's pool: that stream must have
        # waited for this parameter's last use already.
        assert self.name in self._rtd_land_stream.waited, \
            f"{self.name} freed before its stream waited for its last use"
        self.freed.append(self.name)


events = []


def make_event():
    e = Event()
    e.name = events[-1] if events else None
    return e


torch.cuda.Event = make_event  # a stand-in: this process never touches a GPU

landing = _fsdp_comms._Landing()
freed = []
gather_stream = Stream("all-gather")


def queue(name):
    """FSDP2's reshard of unit `name` (one parameter a unit)."""
    p = Param(name, gather_stream, freed)
    events.append(name)  # the event recorded at this free is named for it
    landing.free_later(name, p, p.free)
    return p


def expect(what, want_freed, want_queued):
    got_queued = [entry[0] for entry in landing.queued]
    assert freed == want_freed and got_queued == want_queued, \
        f"{what}: freed {freed}, queued {got_queued}; expected {want_freed}, {want_queued}"


# The forward: units 0..3 resharded, a landing between each.
queue(0)
landing.landing()
expect("forward, after one reshard", [], [0])
queue(1)
landing.landing()
expect("forward, a landing keeps the newest", [0], [1])
p2 = queue(2)
queue(3)
landing.landing()
expect("forward, a landing frees all but the newest", [0, 1, 2], [3])
# A queued parameter gathered again keeps its memory; the new stream waits for it.
q = queue(4)
other = Stream("second")
landing.claim([q], other)
expect("claim", [0, 1, 2], [3])
assert other.waited == [4], f"a claimed parameter's stream waited for {other.waited}"
# The end of the root's forward frees all (the hook on the root, no FSDP2 here).
landing.release(keep_newest=False)
expect("the end of the forward", [0, 1, 2, 3], [])


class Backward(torch.autograd.Function):
    """Runs `step` inside autograd's backward, where FSDP2's hooks run."""

    @staticmethod
    def forward(ctx, x, step):
        ctx.step = step
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.step()
        return grad, None


def in_backward():
    queue(5)
    queue(6)
    expect("backward, a free frees all but the newest", [0, 1, 2, 3, 5], [6])
    landing.landing()
    expect("backward, a landing frees all", [0, 1, 2, 3, 5, 6], [])
    queue(7)  # the last unit's reshard: nothing lands after it in this backward


x = torch.ones(2, requires_grad=True)
Backward.apply(x, in_backward).sum().backward()
expect("the end of the backward", [0, 1, 2, 3, 5, 6, 7], [])
assert landing.at_end.task is None, "the end of the backward left its task behind"
# Outside a backward, a free only queues; a parameter never landed goes at once.
queue(8)
expect("after the backward", [0, 1, 2, 3, 5, 6, 7], [8])
unlanded = Param(9, None, freed)
landing.free_later(9, unlanded, lambda: freed.append(9))
expect("a parameter never landed", [0, 1, 2, 3, 5, 6, 7, 9], [8])
print("landing queue: forward, claim, the forward's end, the backward and its end: "
      "freed when the policy says, each after its stream waited")
