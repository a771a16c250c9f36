"""What a user sees when ranks disagree (run under dtrun with 2 ranks):
    dtrun --nproc-per-node=2 python tests/torch/failures.py CASE [cpu|cuda]
missing: rank 1 skips an all_reduce; rank 0's call fails within the timeout
with an exception naming rank 1 (on CUDA, whose calls return before they
run: at the latest its next call). mismatch: the ranks reduce different
sizes; every rank's call fails with an exception. Each rank prints what it
caught and exits 3, so that the caller can tell this from a crash.
CUDA only: late: as missing, but rank 0 calls nothing more; with
RTD_TORCH_ASYNC_ERRORS=1 the failure must be raised in its main thread all
the same (the failure watch). exit:
as late, with that raise turned off (RTD_TORCH_ASYNC_ERRORS=0) and rank 0
ending its script: the process must still exit 1, naming the failure.
exit_unwaited (any device): rank 0 drops an all_reduce's Work unwaited, rank 1
never calls it, rank 0 waits past the timeout and ends its script: the
process must exit 1, naming the failure.
dropped: rank 0 drops an all_reduce's Work unwaited, rank 1 never calls it,
and rank 0 destroys the group: the collective is cut short, which rank 0
must be told of (a RuntimeWarning, printed as caught).
agree: rank 0 takes back a parked FSDP2 buffer (fsdp_comms), whose place
the ranks agree on through the store, and rank 1 never does: rank 0 fails
within the timeout, naming rank 1.
"""

import os
import sys
import time
import warnings
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
    if case in ("missing", "late", "exit"):
        if rank != 1:
            dist.all_reduce(torch.ones(4, device=device))
            if device == "cuda":
                torch.cuda.synchronize()  # returns once the timeout aborted the call
                if case == "missing":
                    dist.all_reduce(torch.ones(4, device=device))
                elif case == "late":
                    for _ in range(200):  # 10 s of host work, no call of the group
                        time.sleep(0.05)
                else:
                    sys.exit(0)
        else:
            time.sleep(12)
            sys.exit(0)
    elif case == "exit_unwaited":  # any device: a Work dropped unwaited, its failure unraised
        if rank != 1:
            dist.all_reduce(torch.ones(4, device=device), async_op=True)
            time.sleep(8)  # past the timeout, with no call of the group
            sys.exit(0)
        else:
            time.sleep(12)
            sys.exit(0)
    elif case == "dropped":
        if rank != 1:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                dist.all_reduce(torch.ones(4, device=device), async_op=True)  # Work dropped
                dist.destroy_process_group()
            said = [str(w.message) for w in seen if "in flight" in str(w.message)]
            if said:
                print(f"rank {rank} caught RuntimeWarning: {said[0]}", flush=True)
                os._exit(3)
        else:
            time.sleep(2)
            sys.exit(0)
    elif case == "agree":
        comm = dist.group.WORLD._comm(torch.device(device))
        if rank != 1:
            comm.any_rank(True, "a parked FSDP2 buffer's place")
        else:
            time.sleep(8)
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
