"""The failure watch: a CUDA communicator's failure raised in the main thread.

A CUDA collective returns before it runs, and Work.wait() only orders the
caller's stream after it. So when NCCL fails later (a peer that never calls
and the group's timeout passes, a peer that dies), nothing the trainer calls
is there to fail: after the abort its stream runs on, and a script that
calls no collective again would go on with a half-reduced tensor, save it
and exit 0. ProcessGroupNCCL ends the process then. Here, instead:

- a thread checks every CUDA communicator of the process every 50 ms and,
  on its first failure, raises it in the main thread (as Ctrl-C raises
  KeyboardInterrupt there), as a CommunicatorFailed naming the rank and the
  collective, unless a call of the group has already raised it;
- the group's next call raises it too (the communicator refuses work);
- a process that reaches its exit with a failure nobody saw prints it and
  exits 1, so that no launcher counts the run a success.

RTD_TORCH_ASYNC_ERRORS=0 turns the raise in the main thread off (the other
two stay). The check costs the host one call into librt_dist per
communicator every 50 ms, outside the trainer's thread.
"""

import ctypes
import os
import sys
import threading
import time
import weakref

import torch.distributed as dist

_PERIOD_S = 0.05

_Base = getattr(dist, "DistBackendError", RuntimeError)


class CommunicatorFailed(_Base):
    """A communicator of the rtd backend failed after its call returned."""


class _Watch:
    def __init__(self):
        self._comms = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread = None
        self._main = threading.main_thread().ident

    def add(self, comm, raise_in_main):
        comm.raise_in_main = raise_in_main
        with self._lock:
            self._comms.add(comm)
            if raise_in_main and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rtd-failure-watch",
                                                daemon=True)
                self._thread.start()

    def _run(self):
        while True:
            time.sleep(_PERIOD_S)
            for comm in list(self._comms):
                if not comm.raise_in_main:
                    continue
                message = comm.unseen_failure()
                if message is not None:
                    _raise_in(self._main, message)

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
    value = os.environ.get("RTD_TORCH_ASYNC_ERRORS", "1")
    if value not in ("0", "1"):
        raise ValueError(f"RTD_TORCH_ASYNC_ERRORS={value!r}: use 0 or 1")
    _watch.add(comm, value == "1")


def exit_status():
    """At the interpreter's exit: prints the failures nobody saw; 1 if any."""
    unseen = _watch.unseen()
    for message in unseen:
        print(f"rtd: {message} (found at exit: this process fails)", file=sys.stderr,
              flush=True)
    return 1 if unseen else 0
