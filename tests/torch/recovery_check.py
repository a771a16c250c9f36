"""rt_dist.torch.recovery.Job.check() raises once the job's store says the
generation ended (what dtrun writes when it starts a replacement): the watch
aborts the group, and the step is not counted. Every rank prints "check
raised" or "check passed"; run under dtrun --recovery=in-process."""

import time

import torch
import torch.distributed as dist

from rt_dist.torch import recovery

# Refused before anything is made: state that is neither a module nor an
# optimizer, and a backend whose groups it cannot rebuild.
for args, kwargs, error in (([[1]], {}, TypeError), ([[]], {"backend": "gloo"}, ValueError)):
    try:
        recovery.Job(*args, **kwargs)
        raise AssertionError(f"Job({args}, {kwargs}) was accepted")
    except error as e:
        print(f"rank ?: refused: {e}", flush=True)
job = recovery.Job([torch.nn.Linear(2, 2)])
job.check()  # nothing failed yet: passes
dist.barrier()
if dist.get_rank() == 0:
    job._store.set(f"recovery/end/{job.generation}", "a test")
try:
    for _ in range(100):  # the watch looks every half second
        time.sleep(0.1)
        job.check()
    print(f"rank {dist.get_rank()}: check passed", flush=True)
except RuntimeError as e:
    print(f"rank {dist.get_rank()}: check raised: {e}", flush=True)
job.close()
