"""The Work of a ProcessGroupRTD collective (_Work: ProcessGroupNCCL's
stream contract, futures) and the thread that completes CPU Works' futures
(_Completer)."""

import threading
from collections import deque
from datetime import timedelta

import torch
import torch.distributed as dist


class _Work(dist.Work):
    """A librt_dist Work, holding the tensors it reads and writes until done."""

    def __init__(self, pg, comm, handle, what, tensors, result, after=None):
        super().__init__()
        self._pg = pg
        self._comm = comm
        self._handle = handle
        self._what = what
        self._tensors = tensors  # kept alive until the operation is done
        self._result = result
        self._after = after  # host work once complete (CPU: copies into output lists)
        self._future = None
        self._finished = False

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h:
            self._handle = None
            if self._tensors and self._comm.handle and not self._comm.lib.rtd_work_done(h):
                self._comm.keep_until_done(h, self._tensors)
            else:
                self._comm.lib.rtd_work_free(h)

    def _raise_if_failed(self):
        if self._comm.lib.rtd_work_error(self._handle):
            raise self._comm.failed(self._pg, self._what)

    def _finish_host(self, timeout_ms):
        if self._finished:
            return
        if self._comm.lib.rtd_work_wait(self._handle, timeout_ms) != 0:
            raise self._comm.failed(self._pg, self._what)
        self._finished = True
        self._tensors = None
        if self._after:
            self._after()

    def is_completed(self):
        return bool(self._comm.lib.rtd_work_done(self._handle))

    def is_success(self):
        return self.is_completed() and not self._comm.lib.rtd_work_error(self._handle)

    def wait(self, timeout=None):
        if self._comm.cuda:
            self._raise_if_failed()
            # The caller's stream waits for the operation; the host does not.
            if self._comm.lib.rtd_work_wait_stream(self._handle, self._comm.stream()) != 0:
                raise self._comm.failed(self._pg, self._what)
            self._tensors = None  # the caller's stream is ordered after the operation
            if self._after:
                self._after()
                self._after = None
        else:
            no_limit = timeout is None or timeout == timedelta(0)
            self._finish_host(-1 if no_limit else int(timeout.total_seconds() * 1000))
        return True

    def result(self):
        """The output tensors, once done (waits as wait() does)."""
        self.wait()
        return self._result

    def get_future(self):
        if self._future is not None:
            return self._future
        if self._comm.cuda:
            # A CUDA-aware future: its value is ready at once for the host,
            # and whoever waits on it (or a callback of then()) runs on
            # streams ordered after the operation.
            fut = torch.futures.Future(devices=[torch.device("cuda", self._comm.device)])
            side = self._comm.side
            side.wait_stream(torch.cuda.current_stream(self._comm.device))
            with torch.cuda.stream(side):
                if self._comm.lib.rtd_work_wait_stream(self._handle, side.cuda_stream) != 0:
                    raise self._comm.failed(self._pg, self._what)
                if self._after:
                    self._after()
                    self._after = None
                fut.set_result(self._result)
        else:
            fut = torch.futures.Future()
            if self._finished or self.is_completed():
                self._finish_host(-1)
                fut.set_result(self._result)
            else:
                self._pg._completer().submit(self, fut)
        self._future = fut
        return fut


class _Completer:
    """A thread that completes the futures of CPU work as it finishes."""

    def __init__(self):
        self._queue = deque()
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="rtd-futures", daemon=True)
        self._thread.start()

    def submit(self, work, fut):
        with self._cv:
            self._queue.append((work, fut))
            self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                work, fut = self._queue.popleft()
            try:
                work._finish_host(-1)
                fut.set_result(work._result)
            except Exception as e:
                fut.set_exception(e)
