#!/usr/bin/python3
"""The docs/ figures, drawn from the benchmarks' recorded JSON (matplotlib
from the distribution's packages):

  allreduce_busbw.png    all-reduce bus bandwidth against message size: our
                         communicator, raw NCCL, torch.distributed (one run)
  step_time_memory.png   the reference MLP's step time and memory per
                         strategy, ours against PyTorch's (one run)

    /usr/bin/python3 bench/plots/make_figures.py [OUT_DIR=docs/figures] [RESULTS=bench/plots/data]
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# The runs the figures show: each has ours and its anchor from the same call.
BUSBW_RUN = "2026-11-22-h200x2"
STEP_RUN = "2026-11-23-h200x2-final"


def load(results, run, name):
    with open(os.path.join(results, run, name)) as f:
        return json.load(f)


def busbw_figure(results, out):
    plt.figure(figsize=(7, 4.2))
    for name, label, style in [("bench_ours.json", "ours (rtd NCCL communicator)", "o-"),
                               ("bench_raw.json", "raw NCCL (ncclAllReduce)", "s--")]:
        rows = [r for r in load(results, BUSBW_RUN, name)["rows"]
                if r["op"] == "all_reduce" and r["dtype"] == "float32"]
        plt.plot([r["bytes"] for r in rows], [r["busbw_gbs"] for r in rows], style, label=label,
                 markersize=3)
    anchor = load(results, BUSBW_RUN, "anchor.json")
    sizes = [(1, "1MB"), (16, "16MB"), (64, "64MB"), (256, "256MB"), (1024, "1024MB")]
    pts = [(mb * 2**20, anchor["allreduce_busbw_float32_" + key]) for mb, key in sizes
           if "allreduce_busbw_float32_" + key in anchor]
    plt.plot([p[0] for p in pts], [p[1] for p in pts], "^:", label="torch.distributed (NCCL)")
    plt.xscale("log", base=2)
    plt.xlabel("message size (bytes)")
    plt.ylabel("bus bandwidth (GB/s)")
    plt.title("all-reduce, float32, 2 x H200 (NVLink), " + BUSBW_RUN[:10])
    plt.grid(True, which="both", alpha=0.3)
    plt.legend()
    plt.tight_layout()
    path = os.path.join(out, "allreduce_busbw.png")
    plt.savefig(path, dpi=110)
    plt.close()
    return path


def step_figure(results, out):
    rows = load(results, STEP_RUN, "fsdp_step.json")["rows"]
    anchor = load(results, STEP_RUN, "anchor.json")

    def ours(mode):
        for r in rows:
            if r["mode"] == mode and r["grads"] == "fp32" and r["reduce"] in ("-", "fp32"):
                return r["step_ms"], r["model_gib"]
        return None

    strategies = [("one GPU", ours("one GPU"), "single"),
                  ("DDP", ours("DDP+opt"), "ddp"),
                  ("ZeRO-1", ours("zero1"), "zero1"),
                  ("ZeRO-2", ours("zero2"), "fsdp2_noreshard_fp32"),
                  ("ZeRO-3", ours("zero3"), "fsdp2")]
    names = [s[0] for s in strategies]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, k, unit, key in [(axes[0], 0, "step time (ms)", "_ms"),
                             (axes[1], 1, "memory (GiB)", "_gib")]:
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], [s[1][k] for s in strategies], 0.4, label="ours")
        ax.bar([i + 0.2 for i in x], [anchor.get(s[2] + key, 0) for s in strategies], 0.4,
               label="PyTorch (DDP, ZeroRedundancyOptimizer, FSDP2)")
        ax.set_xticks(list(x))
        ax.set_xticklabels(names)
        ax.set_ylabel(unit)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("reference MLP (537M params, AdamW), 2 x H200, fp32 gradients, " + STEP_RUN[:10])
    fig.tight_layout()
    path = os.path.join(out, "step_time_memory.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "docs/figures"
    results = sys.argv[2] if len(sys.argv) > 2 else "bench/plots/data"
    os.makedirs(out, exist_ok=True)
    for path in (busbw_figure(results, out), step_figure(results, out)):
        print("wrote", path)


if __name__ == "__main__":
    main()
