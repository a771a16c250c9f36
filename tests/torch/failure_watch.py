"""The failure watch (rt_dist/torch/_failure_watch.py) without a GPU: a
communicator that fails after its call returned is raised in the main thread
once, with its message, while that thread runs Python code that calls nothing
of ours (with RTD_TORCH_ASYNC_ERRORS=1; by default nothing is raised there
and the failure waits for the next call or the exit); a failure nobody saw is
reported at exit; with the raise turned off
nothing is raised and the failure waits for the exit; at exit the watch asks
librt_dist to call no more Python.
    dtrun --nproc-per-node=1 python tests/torch/failure_watch.py
"""

import os
import sys
import _thread
import time

from rt_dist.torch import _failure_watch as fw


class FakeComm:
    """What the watch uses of a _Comm; fail() calls its listener from a
    thread of its own, as librt_dist's watchdog thread does."""

    def __init__(self):
        self.failure = None
        self.seen = False
        self.listener = None
        self.cleared = False

    def on_failure(self, listener):
        self.listener = listener
        self.cleared = listener is None

    def fail(self, message):
        self.failure = message
        if self.listener:
            _thread.start_new_thread(self.listener, ())  # not waiting for it to start

    def unseen_failure(self):
        if self.seen or self.failure is None:
            return None
        self.seen = True
        return self.failure


def busy(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


d = FakeComm()
os.environ.pop("RTD_TORCH_ASYNC_ERRORS", None)
fw.watch(d)
assert d.listener is None, "by default nothing is raised in the main thread"
d.fail("rtd group of 2 cuda on rank 0 of 2: a failure left to the next call")
busy(0.3)
assert fw.exit_status() == 1, "by default a failure nobody asked for still fails the exit"

a = FakeComm()
os.environ["RTD_TORCH_ASYNC_ERRORS"] = "1"  # the immediate raise, opt-in
fw.watch(a)
busy(0.3)  # healthy: nothing raised
a.fail("rtd group of 2 cuda on rank 0 of 2: nccl all_reduce #2 ... rank 1 has not called it")
try:
    busy(5)
    sys.exit("FAILED: no exception in the main thread within 5 s")
except fw.CommunicatorFailed as e:
    assert "rank 1 has not called it" in str(e), str(e)
    assert isinstance(e, RuntimeError)
busy(0.3)  # raised once only
assert fw.exit_status() == 0, "a failure raised is not reported again at exit"
assert a.cleared, "at exit librt_dist is told to call no more Python"

b = FakeComm()
os.environ["RTD_TORCH_ASYNC_ERRORS"] = "0"
fw.watch(b)
assert b.listener is None, "no listener where the raise is off"
b.fail("rtd group of 2 cuda on rank 0 of 2: second failure")
busy(0.3)  # not raised: turned off for b
assert fw.exit_status() == 1, "a failure nobody saw fails the exit"
assert fw.exit_status() == 0, "reported once"
os.environ["RTD_TORCH_ASYNC_ERRORS"] = "bad"
try:
    fw.watch(FakeComm())
    sys.exit("FAILED: a bad RTD_TORCH_ASYNC_ERRORS was taken")
except ValueError as e:
    assert "RTD_TORCH_ASYNC_ERRORS" in str(e)
print("failure watch: ok", flush=True)
