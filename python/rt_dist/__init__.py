"""rt_dist: Python access to librt_dist.

``import rt_dist.torch`` registers the ``rtd`` backend of torch.distributed
(see docs/torch.md). This package itself needs only the standard library.
"""

__version__ = "0.1.0"
