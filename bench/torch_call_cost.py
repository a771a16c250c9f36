"""The rtd backend's own cost per call: the host time to issue a 4-byte
all_reduce, through each layer, in a world of one on CPU (so the transfer
costs nothing and what remains is the calling):
    python bench/torch_call_cost.py     (rt_dist on PYTHONPATH)
Prints microseconds per call for: the C interface through ctypes; the
process group's allreduce; torch.distributed.all_reduce on rtd; the same on
torch's own gloo.
"""

import os
import time

import torch
import torch.distributed as dist

import rt_dist.torch  # noqa: F401
from rt_dist import _capi

N = 20000


def per_call(f):
    works = []
    t0 = time.perf_counter()
    for _ in range(N):
        works.append(f())
    us = (time.perf_counter() - t0) / N * 1e6
    return us, works


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29631")
    dist.init_process_group("rtd", rank=0, world_size=1)
    pg = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    t = torch.ones(1)
    for _ in range(200):
        dist.all_reduce(t)
        dist.all_reduce(t, group=gloo)
    comm = pg._comms["cpu"]
    ptr = t.data_ptr()
    opts = dist.AllreduceOptions()
    rows = [
        ("C interface (ctypes)", lambda: comm.lib.rtd_all_reduce(
            comm.handle, ptr, ptr, 1, _capi.FLOAT32, _capi.SUM, -1, None)),
        ("ProcessGroupRTD.allreduce", lambda: pg.allreduce([t], opts)),
        ("dist.all_reduce on rtd", lambda: dist.all_reduce(t, async_op=True)),
        ("dist.all_reduce on gloo", lambda: dist.all_reduce(t, group=gloo, async_op=True)),
    ]
    for name, f in rows:
        us, works = per_call(f)
        for w in works:
            if isinstance(w, int):
                comm.lib.rtd_work_wait(w, -1)
                comm.lib.rtd_work_free(w)
            else:
                w.wait()
        print(f"{name:28s} {us:6.2f} us per call (issue only)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
