"""From typing the launcher to the first completed all-reduce of a PyTorch
script, dtrun against torchrun on the same script, alternating, in one run:
  python3 bench/launch_to_first_all_reduce.py DTRUN [NPROC] [REPEATS]
Env: BACKENDS (default "nccl rtd" where there is a GPU, else "gloo rtd"):
torch.distributed's backend under each launcher; torchrun runs each but rtd
(which it has no rt_dist for). TORCHRUN (default: the torchrun beside this
Python). Each worker is this file with --worker: it notes the wall clock at
its first line, after `import torch`, after init_process_group and after the
first all_reduce of 4 bytes; the launcher's figure is its slowest rank's.
Prints a line and a RESULT {json} per run, then a SUMMARY {json} (medians).
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def worker():
    t_first = time.time()
    import torch
    import torch.distributed as dist

    t_import = time.time()
    backend = os.environ["BENCH_BACKEND"]
    cuda = torch.cuda.is_available() and backend != "gloo"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    t_init = time.time()
    x = torch.ones(1, device="cuda" if cuda else "cpu")
    dist.all_reduce(x)
    if cuda:
        torch.cuda.synchronize()
    t_op = time.time()
    assert x.item() == dist.get_world_size()
    with open(os.path.join(os.environ["BENCH_OUT"], f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(dict(first=t_first, imported=t_import, init=t_init, op=t_op), f)
    dist.destroy_process_group()


def one_run(launcher, cmd, backend, nproc, out):
    env = dict(os.environ, BENCH_BACKEND=backend, BENCH_OUT=out, NCCL_NVLS_ENABLE="0")
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    t_end = time.time()
    if proc.returncode != 0:
        sys.exit(f"{launcher} {backend} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    ranks = []
    for r in range(nproc):
        with open(os.path.join(out, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
        os.remove(os.path.join(out, f"rank{r}.json"))

    def ms(key):  # the slowest rank's time since the command was typed
        return round((max(r[key] for r in ranks) - t0) * 1e3, 1)

    return dict(launcher=launcher, backend=backend, nproc=nproc, to_worker_ms=ms("first"),
                imported_ms=ms("imported"), init_ms=ms("init"), first_all_reduce_ms=ms("op"),
                exit_ms=round((t_end - t0) * 1e3, 1))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker()
    dtrun = sys.argv[1]
    nproc = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    backends = os.environ.get("BACKENDS", "nccl rtd" if gpu else "gloo rtd").split()
    torchrun = os.environ.get("TORCHRUN") or shutil.which(
        "torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    me = os.path.abspath(__file__)
    runs = []
    with tempfile.TemporaryDirectory() as out:
        for i in range(repeats):
            for backend in backends:
                cmds = [("dtrun", [dtrun, f"--nproc-per-node={nproc}", "--env", "RTD_LOG=warn",
                                   sys.executable, me, "--worker"])]
                if backend != "rtd":
                    cmds.append(("torchrun", [torchrun, "--standalone", f"--nproc-per-node={nproc}",
                                              me, "--worker"]))
                for launcher, cmd in cmds:
                    r = one_run(launcher, cmd, backend, nproc, out)
                    r["run"] = i + 1
                    runs.append(r)
                    print(f"{launcher:8} {backend:5} run {i + 1}: to worker "
                          f"{r['to_worker_ms']} ms, import torch done {r['imported_ms']}, "
                          f"init done {r['init_ms']}, first all_reduce "
                          f"{r['first_all_reduce_ms']}, exit {r['exit_ms']}")
                    print("RESULT " + json.dumps(r), flush=True)
    summary = {}
    for r in runs:
        key = f"{r['launcher']}/{r['backend']}"
        summary.setdefault(key, []).append(r["first_all_reduce_ms"])
    print("SUMMARY " + json.dumps({k: dict(median_ms=statistics.median(v), runs=v)
                                   for k, v in summary.items()}))


if __name__ == "__main__":
    main()
