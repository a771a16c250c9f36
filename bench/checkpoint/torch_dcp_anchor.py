#!/usr/bin/env python3
"""The anchor for ckpt_bench --device cuda: PyTorch saving and loading the
same state (N float32 parameters and AdamW's two moments, on GPU 0) with
torch.distributed.checkpoint, in one process, into DIR; the load after the
page cache was dropped where this process may (root). Also the blocking time
of dcp.async_save. Prints a table line and JSON, as ckpt_bench does.

    torch_dcp_anchor.py DIR [PARAMS=537e6] [ROUNDS=2]
"""
import json
import os
import shutil
import sys
import time

import torch
import torch.distributed.checkpoint as dcp


def drop_page_cache():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def main():
    root = sys.argv[1]
    n = int(float(sys.argv[2])) if len(sys.argv) > 2 else 537_000_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    idx = torch.arange(n, device="cuda", dtype=torch.float32).remainder_(1000).mul_(0.001)
    state = {name: idx + t for t, name in enumerate(["param", "exp_avg", "exp_avg_sq"])}
    del idx
    torch.cuda.synchronize()
    gb = 3 * n * 4 / 1e9
    print("torch %s, torch.distributed.checkpoint, state on the GPU" % torch.__version__)
    print("%10s %10s %10s %12s %12s %12s %s" % ("GB", "save_s", "load_s", "save_GB/s", "load_GB/s",
                                                "async_blk_s", "load from"))
    for _ in range(rounds):
        shutil.rmtree(root, ignore_errors=True)
        t0 = time.perf_counter()
        dcp.save(state, checkpoint_id=os.path.join(root, "sync"))
        os.sync()
        save_s = time.perf_counter() - t0
        cold = drop_page_cache()
        target = {k: torch.empty_like(v) for k, v in state.items()}
        t0 = time.perf_counter()
        dcp.load(target, checkpoint_id=os.path.join(root, "sync"))
        torch.cuda.synchronize()
        load_s = time.perf_counter() - t0
        if not all(torch.equal(target[k], state[k]) for k in state):
            print("FAILED: the loaded state differs")
            sys.exit(1)
        del target
        blocked = None
        if hasattr(dcp, "async_save"):
            # The first call sets up its staging; the second is timed.
            dcp.async_save(state, checkpoint_id=os.path.join(root, "a1")).result()
            t0 = time.perf_counter()
            fut = dcp.async_save(state, checkpoint_id=os.path.join(root, "a2"))
            blocked = time.perf_counter() - t0
            fut.result()
        frm = "disk" if cold else "page cache"
        print("%10.2f %10.3f %10.3f %12.2f %12.2f %12s %s" % (
            gb, save_s, load_s, gb / save_s, gb / load_s,
            "%.3f" % blocked if blocked is not None else "-", frm))
        print(json.dumps({"bench": "torch_dcp", "bytes": 3 * n * 4, "save_s": save_s,
                          "load_s": load_s, "async_block_s": blocked, "load_from": frm}))
        sys.stdout.flush()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
