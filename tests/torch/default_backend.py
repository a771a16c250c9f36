"""RTD_TORCH_DEFAULT=1 makes rtd torch.distributed's default backend: a script
that names no backend (as PyTorch's FSDP2 example, which asks
get_default_backend_for_device) runs on rtd, unchanged; without it the
default stays torch's. Run under dtrun, 2 ranks, on CPU:
    dtrun --nproc-per-node=2 python tests/torch/default_backend.py 1|0
(1: RTD_TORCH_DEFAULT=1 is set in the environment; 0: it is not.)
Also RTD_TORCH_GEMM_SM_CARVEOUT (set to 8 for the first; unset, or not a
count, for the second): PyTorch's GEMMs then leave that many SMs free, and
otherwise nothing of PyTorch's changes.
"""

import os
import sys

import torch
import torch.distributed as dist

want_rtd = sys.argv[1] == "1"
expected = "rtd" if want_rtd else "gloo"
got = dist.get_default_backend_for_device(torch.device("cpu"))
assert got == expected, f"the default backend for CPU is {got!r}, not {expected!r}"
carveout = torch._C._get_sm_carveout_experimental()
blas = torch.backends.cuda.preferred_blas_library()
if want_rtd:
    assert carveout == 8, f"RTD_TORCH_GEMM_SM_CARVEOUT=8 set a carveout of {carveout}"
    assert blas == torch._C._BlasBackend.Cublaslt, f"the carveout without cuBLASLt: {blas}"
else:
    setting = os.environ.get("RTD_TORCH_GEMM_SM_CARVEOUT")
    assert carveout is None, f"a carveout of {carveout} with RTD_TORCH_GEMM_SM_CARVEOUT={setting!r}"
    assert blas == torch._C._BlasBackend.Cublas, f"torch's BLAS changed to {blas}"
dist.init_process_group()  # no backend named, as the scripts this is for
rank, n = dist.get_rank(), dist.get_world_size()
name = dist.get_backend_config()  # "cpu:<backend>" (get_backend() says "undefined")
assert name == f"cpu:{expected}", f"the default group's backends are {name!r}, not cpu:{expected}"
t = torch.full((5,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((5,), n * (n + 1) / 2)), t.tolist()
dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print(f"default backend: {name}, all_reduce right")
