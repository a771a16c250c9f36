"""PyTorch's own distributed test suite (DistributedTest._DistTestBase, from
torch.testing._internal.distributed.distributed_test in the torch wheel), run
as torch's own test_distributed_spawn.py runs it, with its process groups on
the rtd backend:
    BACKEND=gloo RTD_SUITE_BACKEND=rtd WORLD_SIZE=2 python dist_suite.py -v [TESTS]
BACKEND is what the suite's feature gates read (gloo on CPU, nccl on GPUs);
RTD_SUITE_BACKEND=rtd turns every group the suite asks of that backend (by
init_process_group or new_group) into an rtd group. That is done here, in
this harness; torch itself is not edited. Without RTD_SUITE_BACKEND the
suite runs on BACKEND itself (the reference counts). TEMP_DIR defaults to a
fresh folder. tests/torch/conformance/run.sh runs both and compares.
"""

import os
import tempfile

os.environ.setdefault("BACKEND", "gloo")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="dist_suite_"))

import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)

SUITE_BACKEND = os.environ["BACKEND"]
TARGET = os.environ.get("RTD_SUITE_BACKEND", "")

if TARGET:
    import rt_dist.torch  # noqa: F401  (registers rtd)

    def _mapped(backend):
        if backend is not None and str(backend).lower() == SUITE_BACKEND:
            return TARGET
        return backend

    _init = dist.init_process_group
    _new_group = dist.new_group

    def init_process_group(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = _mapped(kwargs["backend"])
        elif args:
            args = (_mapped(args[0]),) + args[1:]
        return _init(*args, **kwargs)

    def new_group(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = _mapped(kwargs["backend"])
        elif len(args) > 2:
            args = args[:2] + (_mapped(args[2]),) + args[3:]
        return _new_group(*args, **kwargs)

    dist.init_process_group = init_process_group
    dist.new_group = new_group


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
