# Types of rt_dist.torch._C, the rtd backend's C++ half (python/csrc/module.cc).
import datetime

import torch.distributed as dist

TORCH_VERSION: str

def load(path: str) -> None: ...

class ProcessGroupRTD(dist.ProcessGroup):
    def __init__(self, store: dist.Store, rank: int, size: int,
                 timeout: datetime.timedelta) -> None: ...
    @property
    def calls(self) -> int: ...

class JobStore(dist.Store):
    """dtrun's store under this worker's round (rt_dist.torch.recovery)."""
    def __init__(self, timeout: datetime.timedelta = ...) -> None: ...

def job_info() -> dict[str, int | bool | float]: ...
def unraised_failures() -> list[str]: ...
