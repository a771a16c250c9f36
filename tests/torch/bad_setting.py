"""A setting of the rtd backend with a value it cannot take: `import torch`
(which registers the backend) still works and warns, and making an rtd
group raises ValueError naming every such variable. Under dtrun, 1 rank:
    RTD_TORCH_DEFAULT=yes dtrun --nproc-per-node=1 python tests/torch/bad_setting.py NAME...
(NAME: each variable the error must name.)
"""

import sys
import warnings

with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    import torch  # noqa: F401  (registers the backend, as a script's import does)
    import torch.distributed as dist

    import rt_dist.torch  # noqa: F401

names = sys.argv[1:]
warned = " ".join(str(w.message) for w in seen)
for name in names:
    assert name in warned, f"no warning at import names {name}: {warned!r}"
try:
    dist.init_process_group("rtd")
except ValueError as e:
    missing = [name for name in names if name not in str(e)]
    assert not missing, f"the error '{e}' does not name {missing}"
    print(f"bad settings refused: {e}")
    sys.exit(0)
raise AssertionError("init_process_group('rtd') accepted the bad settings")
