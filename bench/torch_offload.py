# PyTorch FSDP2 with CPU offload (CPUOffloadPolicy) on the reference MLP
# (mlp_gpu's task: the layers learn the GELU of their input): the
# configuration that rtd::FSDP's offload is measured against, in the same run.
# One process per GPU (torchrun or dtrun); env H, L, B change the MLP, STEPS
# and WARM the measured and warm-up steps, REDUCE=bf16 the gradients' dtype
# (fp32 by default), FUSED=0 the for-loop AdamW, FLUSH_DENORMAL=1 denormals
# as zero on the CPU, OFFLOAD=0 keeps everything
# on the GPU (FSDP2 full shard). MODEL=<a bench/zoo shape> (llama-1b, ...)
# trains that transformer instead of the MLP (its sequence and batch; B sets
# the batch); OPTIM=rtd steps with rt_dist.torch.HostAdamW instead of
# torch.optim.AdamW, OPTIM=rtd_backward with HostAdamW(in_backward=True).
# Prints one "RESULT {json}" line: step_ms, opt_ms (the optimizer's step
# alone), the GPU's peak memory and the host's peak resident memory.
#   torchrun --nproc-per-node=1 bench/torch_offload.py
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group(os.environ.get("BACKEND", "nccl"))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dev = torch.device("cuda")
    H = int(os.environ.get("H", "8192"))
    L = int(os.environ.get("L", "8"))
    B = int(os.environ.get("B", "8192"))
    steps = int(os.environ.get("STEPS", "5"))
    warm = int(os.environ.get("WARM", "2"))
    offload = os.environ.get("OFFLOAD", "1") == "1"
    # FLUSH_DENORMAL=1: the CPU treats denormal floats as zero, as our host
    # AdamW does (tiny gradients square into them, and x86 runs them slowly).
    flush = os.environ.get("FLUSH_DENORMAL", "0") == "1"
    torch.set_flush_denormal(flush)
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    shape_name = os.environ.get("MODEL", "mlp")
    # Built on the meta device and materialized by FSDP2 where it keeps them
    # (pinned host memory with offload), so that no full fp32 copy lands on the GPU.
    with torch.device("meta"):
        if shape_name == "mlp":
            model = nn.Sequential(
                *[m for _ in range(L) for m in (nn.Linear(H, H, bias=False), nn.GELU())])
            units = [m for m in model if isinstance(m, nn.Linear)]
        else:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo"))
            from models import LM, OFFLOAD_SHAPES, SHAPES
            shape = {**SHAPES, **OFFLOAD_SHAPES}[shape_name]
            model = LM(shape)
            units = list(model.blocks)
    reduce = torch.bfloat16 if os.environ.get("REDUCE", "fp32") == "bf16" else torch.float32
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce)
    kw = dict(mp_policy=mp)
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    for unit in units:
        fully_shard(unit, **kw)
    fully_shard(model, **kw)
    model.to_empty(device="cpu" if offload else dev)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1 and shape_name == "mlp":
                # mlp_gpu's task and start (examples/02_mlp_gpu/model.cc): weights
                # uniform in +-2.66/sqrt(H), which keep a GELU layer's variance.
                p.uniform_(-2.66 / H**0.5, 2.66 / H**0.5)
            elif p.dim() > 1:
                p.normal_(0.0, 0.02)
            else:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
    n_params = sum(p.numel() for p in model.parameters())
    optim = os.environ.get("OPTIM", "torch")
    if optim in ("rtd", "rtd_backward"):
        from rt_dist.torch import HostAdamW
        opt = HostAdamW(model.parameters(), lr=1e-4, in_backward=optim == "rtd_backward")
    else:
        # fused: PyTorch's fastest AdamW, on the GPU and (since 2.4) on the CPU.
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4,
                                fused=os.environ.get("FUSED", "1") == "1")
    if shape_name == "mlp":
        # The layers learn to give the GELU of their input (mlp_gpu's loss),
        # from an input of variance 1.
        x = torch.empty(B, H, device=dev).uniform_(-3**0.5, 3**0.5)
        target = torch.nn.functional.gelu(x)

        def forward():
            return (model(x).float() - target).pow(2).mean()
    else:
        batch = int(os.environ.get("B", str(shape.batch)))
        tokens = torch.randint(0, shape.vocab, (batch, shape.seq), device=dev)

        def forward():
            return model(tokens)
    torch.cuda.reset_peak_memory_stats()
    t0 = None
    opt_s = 0.0
    for i in range(warm + steps):
        if i == warm:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt_s = 0.0
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward()
        loss.backward()
        t_opt = time.perf_counter()
        opt.step()
        opt_s += time.perf_counter() - t_opt
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / steps * 1e3
    res = dict(torch=torch.__version__, model=shape_name, H=H, L=L, B=B, params=n_params,
               offload=offload, optim=optim, fused=os.environ.get("FUSED", "1") == "1",
               reduce=str(reduce).split(".")[-1], flush_denormal=flush,
               world=dist.get_world_size(), step_ms=ms, opt_ms=opt_s / steps * 1e3,
               loss=loss.item(),
               gpu_peak_gib=torch.cuda.max_memory_allocated() / 2**30,
               host_peak_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
               threads=torch.get_num_threads(),
               optim_threads=getattr(opt, "threads", torch.get_num_threads()),
               optim_kernel=getattr(opt, "kernel", "torch"))
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(res), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
