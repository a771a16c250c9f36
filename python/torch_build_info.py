"""Prints what python/CMakeLists.txt needs to build rt_dist.torch._C against
this Python's torch: its version, include folders (comma-separated), library
folder and the extension suffix, one per line.

Under `pip install ./python` this runs in pip's isolated build environment,
which hides the environment's own packages; torch is then looked for in
this interpreter's site-packages, where the user installed it: the
extension must be built against that torch, not one fetched for the build."""

import site
import sysconfig

try:
    import torch
except ImportError:
    for key in ("purelib", "platlib"):
        site.addsitedir(sysconfig.get_paths()[key])  # with its .pth files
    import torch
from torch.utils import cpp_extension  # noqa: E402

includes = cpp_extension.include_paths() + [sysconfig.get_paths()["include"]]
print(torch.__version__)
print(",".join(includes))
print(cpp_extension.library_paths()[0])
print(sysconfig.get_config_var("EXT_SUFFIX"))
