"""The failure watch: a CUDA communicator's failure raised in the main thread.

A CUDA collective returns before it runs, and Work.wait() only orders the
caller's stream after it. So when NCCL fails later (a peer that never calls
and the group's timeout passes, a peer that dies), nothing the trainer calls
is there to fail: after the abort its stream runs on, and a script that
calls no collective again would go on with a half-reduced tensor, save it
and exit 0. ProcessGroupNCCL ends the process then. Here, instead:

- librt_dist's own thread for the communicator (the watchdog that bounds
  its calls and watches its operations in flight) finds the failure within
  a tenth of the group's timeout (100 ms at most) and calls into Python
  once, which raises it in the main thread (as Ctrl-C raises
  KeyboardInterrupt there), as a CommunicatorFailed naming the rank and the
  collective, unless a call of the group has already raised it -- only
  with RTD_TORCH_ASYNC_ERRORS=1;
- the group's next call (or a Work's wait()) raises it (the communicator
  refuses work): the default;
- a process that reaches its exit with a failure nobody saw prints it and
  exits 1, so that no launcher counts the run a success.

The raise in the main thread is opt-in (RTD_TORCH_ASYNC_ERRORS=1): an
asynchronous exception can land anywhere in the main thread -- inside a
``finally`` or ``__exit__``, half-way through an optimizer step -- and is not
delivered while that thread blocks in C. By default (0) the failure is
raised where the script asks the group for something. While nothing fails,
the watch runs no Python: a Python thread that woke every 50 ms to ask
slowed steps bound by the host's Python.
"""

import ctypes
import sys
import threading
import weakref

import torch.distributed as dist

from rt_dist import _config

_Base = getattr(dist, "DistBackendError", RuntimeError)


class CommunicatorFailed(_Base):
    """A communicator of the rtd backend failed after its call returned."""


class _Watch:
    def __init__(self):
        self._comms = weakref.WeakSet()
        self._main = threading.main_thread().ident

    def add(self, comm, raise_in_main):
        self._comms.add(comm)
        if raise_in_main:
            ref = weakref.ref(comm)
            comm.on_failure(lambda: self._failed(ref))

    def _failed(self, ref):
        """On librt_dist's thread, once, when the communicator failed."""
        comm = ref()
        message = comm.unseen_failure() if comm is not None else None
        if message is not None:
            _raise_in(self._main, message)

    def stop(self):
        """No more calls into Python (returns after a running one)."""
        for comm in list(self._comms):
            comm.on_failure(None)

    def unseen(self):
        """The failures no caller was told of (messages)."""
        out = []
        for comm in list(self._comms):
            message = comm.unseen_failure()
            if message is not None:
                out.append(message)
        return out


def _raise_in(thread_id, message):
    # CPython raises an asynchronous exception as its class called without
    # arguments: a class of its own carries the message.
    cls = type("CommunicatorFailed", (CommunicatorFailed,),
               {"__init__": lambda self, *a: CommunicatorFailed.__init__(self, message)})
    set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc
    set_async.argtypes = [ctypes.c_ulong, ctypes.py_object]
    set_async(thread_id, cls)


_watch = _Watch()


def watch(comm):
    """Watches comm (a CUDA _Comm) from now until it is freed."""
    _watch.add(comm, _config.switch("RTD_TORCH_ASYNC_ERRORS"))


def exit_status():
    """At the interpreter's exit: prints the failures nobody saw; 1 if any."""
    _watch.stop()  # nothing calls into an interpreter that is going
    unseen = _watch.unseen()
    for message in unseen:
        print(f"rtd: {message} (found at exit: this process fails)", file=sys.stderr,
              flush=True)
    return 1 if unseen else 0
