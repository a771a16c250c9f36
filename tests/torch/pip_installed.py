"""After `pip install ./python` (tests/torch/pip_install.sh): the installed
package's extension, not a build tree's, runs an all_reduce of 2 processes on
CPU. Prints "pip install: ok"."""

import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, port):
    import torch

    import rt_dist.torch
    from rt_dist.torch import _C

    if not _C.__file__.startswith(sys.prefix):
        raise AssertionError(f"rt_dist.torch._C from {_C.__file__}, not from {sys.prefix}")
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0)
    dist.init_process_group("rtd", store=store, rank=rank, world_size=2)
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    if not torch.equal(t, torch.full((5,), 3.0)):
        raise AssertionError(f"rank {rank}: {t}")
    dist.destroy_process_group()
    if rank == 0:
        print(f"pip install: ok (rt_dist {rt_dist.torch.__name__} from {_C.__file__})")


if __name__ == "__main__":
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("RTD_LOG", "warn")
    mp.spawn(worker, args=(port,), nprocs=2)
