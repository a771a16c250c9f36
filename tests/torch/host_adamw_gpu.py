"""HostAdamW under FSDP2 with CPUOffloadPolicy on a GPU (under dtrun, 1 rank):
    dtrun --nproc-per-node=1 python tests/torch/host_adamw_gpu.py [rtd|nccl]

Three copies of one model from the same start, on the same batches: stepped
by HostAdamW after backward, by HostAdamW in backward (each parameter as its
gradient's copy to pinned host memory completes: the event path), and by
torch.optim.AdamW. In backward must give the same bits as after backward (a
step that read a gradient before its copy landed would not), and both must
match torch's AdamW (see the tolerance below).
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

import rt_dist.torch  # noqa: F401
from rt_dist.torch import HostAdamW

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "rtd"
H, LAYERS, STEPS = 2048, 6, 5


def model():
    torch.manual_seed(0)
    with torch.device("meta"):
        m = nn.Sequential(*[x for _ in range(LAYERS) for x in (nn.Linear(H, H), nn.GELU())])
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, offload_policy=CPUOffloadPolicy(pin_memory=True))
    fully_shard(m, offload_policy=CPUOffloadPolicy(pin_memory=True))
    m.to_empty(device="cpu")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.to_local().copy_(torch.randn(p.to_local().shape, generator=g) * H**-0.5)
    return m


def main():
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.backends.cuda.matmul.allow_tf32 = False
    dist.init_process_group(BACKEND)
    models = [model() for _ in range(3)]
    opts = [HostAdamW(models[0].parameters(), lr=1e-3, weight_decay=0.1),
            HostAdamW(models[1].parameters(), lr=1e-3, weight_decay=0.1, in_backward=True),
            torch.optim.AdamW(models[2].parameters(), lr=1e-3, weight_decay=0.1, foreach=False)]
    g = torch.Generator(device="cuda").manual_seed(2)
    batches = [torch.randn(512, H, device="cuda", generator=g) for _ in range(STEPS)]
    for x in batches:
        for m, opt in zip(models, opts):
            m(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    torch.cuda.synchronize()
    failures = []
    for (name, a), b, c in zip(models[0].named_parameters(), models[1].parameters(),
                               models[2].parameters()):
        a, b, c = a.to_local(), b.to_local(), c.to_local()
        if not torch.equal(a, b):
            failures.append(f"{name}: in backward differs from after backward by "
                           f"{(a - b).abs().max().item():.3g}")
        # Adam's update of an element whose gradient is near 0 (against eps)
        # follows that gradient's rounding, which the two optimizers' last
        # bits change from the second step on: up to about lr / 1000 apart.
        if not torch.allclose(a, c, rtol=1e-4, atol=1e-6):
            failures.append(f"{name}: differs from torch.optim.AdamW by "
                           f"{(a - c).abs().max().item():.3g}")
    n = len(list(models[1].parameters()))
    if opts[1].stepped_in_backward != n:
        failures.append(f"{opts[1].stepped_in_backward} of {n} parameters stepped in backward")
    for f in failures:
        print("FAILED:", f, flush=True)
    print(f"host_adamw_gpu on {BACKEND}: {'ok' if not failures else 'FAILED'} "
          f"({n} parameters, {STEPS} steps, {opts[0].threads} threads)", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
