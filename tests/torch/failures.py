"""What a user sees when ranks disagree (run under dtrun with 2 ranks):
    dtrun --nproc-per-node=2 python tests/torch/failures.py missing|mismatch [cpu|cuda]
missing: rank 1 skips an all_reduce; rank 0's call fails within the timeout
with an exception naming rank 1. mismatch: the ranks reduce different sizes;
every rank's call fails with an exception. Each rank prints what it caught
and exits 3, so that the caller can tell this from a crash.
"""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import rt_dist.torch  # noqa: F401

case = sys.argv[1]
device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
if device == "cuda":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("rtd", timeout=timedelta(seconds=4))
rank = dist.get_rank()
dist.all_reduce(torch.ones(4, device=device))  # the communicator is up on every rank
try:
    if case == "missing":
        if rank != 1:
            dist.all_reduce(torch.ones(4, device=device))
            if device == "cuda":
                torch.cuda.synchronize()
        else:
            import time
            time.sleep(12)
            sys.exit(0)
    else:
        t = torch.ones(4 + 4 * rank, device=device)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        if device == "cuda":
            torch.cuda.synchronize()
    print(f"rank {rank}: NO ERROR", flush=True)
    sys.exit(0)
except Exception as e:
    print(f"rank {rank} caught {type(e).__name__}: {e}", flush=True)
    os._exit(3)
