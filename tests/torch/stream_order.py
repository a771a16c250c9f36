"""The stream contract of the rtd backend on GPUs (under dtrun, 2 ranks):
a collective queued behind a long kernel on the current stream reads what
that stream wrote after the kernel, and work.wait() orders the current
stream after the collective without blocking the host (the stream is still
busy when wait() returns). Prints "stream order: ok" on rank 0."""

import os

import torch
import torch.distributed as dist

import rt_dist.torch  # noqa: F401

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("rtd")
rank, n = dist.get_rank(), dist.get_world_size()
dist.all_reduce(torch.ones(1, device="cuda"))  # the communicator is up
torch.cuda.synchronize()
expect = float(n * (n + 1) // 2)

for count in (1024, 4 << 20):  # the plain path and, from 1 MiB, the copy-engine one
    t = torch.zeros(count, device="cuda")
    # A size's first call sets its path up (collective; it may wait for the GPU).
    dist.all_reduce(t)
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # about a second of spinning on the current stream
    t.fill_(rank + 1.0)  # written only after the spin
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    busy = not torch.cuda.current_stream().query()
    got = t.cpu()  # the host waits here, on the current stream
    if not torch.all(got == expect):
        raise AssertionError(f"rank {rank}: {count} floats: the collective did not wait for the "
                             f"stream: got {got[:4].tolist()}..., want {expect}")
    if not busy:
        raise AssertionError(f"rank {rank}: work.wait() blocked the host until the stream was "
                             "idle")
    # The same through the future, as DDP's comm hooks take it.
    t.fill_(rank + 1.0)
    fut = dist.all_reduce(t, async_op=True).get_future()
    out = fut.wait()[0]
    if not torch.all(out.cpu() == expect):
        raise AssertionError(f"rank {rank}: future value {out[:4].tolist()} is not {expect}")
dist.barrier()
if rank == 0:
    print("stream order: ok", flush=True)
dist.destroy_process_group()
