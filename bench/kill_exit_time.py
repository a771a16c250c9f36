"""How long a SIGKILLed process that holds a CUDA context takes to end, as
its supervisor sees it: from the kill to the end of its output pipe (the
kernel closes a dying process's files, these first), and to waitpid (the
process gone, its GPU memory given back). In-process recovery starts a
replacement only after the second; the first would let it start sooner.
  python3 bench/kill_exit_time.py [GIB ...]   (default: 0 4 32 GiB held on GPU 0)
Each size twice: CUDA memory only, then also an NCCL communicator (one
rank) used once. Prints a line and a RESULT {json} per case.
"""

import json
import os
import select
import signal
import subprocess
import sys
import time

CHILD = r"""
import os, sys, torch
torch.cuda.init()
held = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
pinned = torch.empty(2**28, dtype=torch.uint8, pin_memory=True)
if sys.argv[2] == "nccl":  # a communicator of one rank, used once
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3])
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    dist.all_reduce(torch.ones(1 << 20, device="cuda"))
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()
"""


def measure(gib: float, nccl: bool) -> dict:
    port = str(29000 + os.getpid() % 1000)
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(gib), "nccl" if nccl else "-", port],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    killed = time.monotonic()
    os.kill(p.pid, signal.SIGKILL)
    select.select([p.stdout], [], [])
    eof = time.monotonic()
    assert p.stdout.read() == b""
    p.wait()
    gone = time.monotonic()
    return {"gib": gib, "nccl": nccl, "pipe_closed_s": round(eof - killed, 4),
            "reaped_s": round(gone - killed, 4)}


for nccl in (False, True):
    for size in [float(a) for a in sys.argv[1:]] or [0, 4, 32]:
        r = measure(size, nccl)
        print(f"{size:g} GiB on the GPU{', an NCCL communicator' if nccl else ''}: output pipe "
              f"closed after {r['pipe_closed_s']:.3f} s, reaped after {r['reaped_s']:.3f} s")
        print("RESULT " + json.dumps(r), flush=True)
