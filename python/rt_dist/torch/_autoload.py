"""The entry point `import torch` calls (group torch.backends): registers the
rtd backend without loading librt_dist, and never fails torch's import."""

import warnings


def load():
    try:
        import rt_dist.torch  # noqa: F401  (registering is its import)
    except Exception as e:  # an old or broken torch.distributed: say so, go on
        warnings.warn(f"rt_dist: the rtd backend was not registered: {e}", stacklevel=2)
