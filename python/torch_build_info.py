"""Prints what python/CMakeLists.txt needs to build rt_dist.torch._C against
this Python's torch: its version, include folders (comma-separated), library
folder and the extension suffix, one per line."""

import sysconfig

import torch
from torch.utils import cpp_extension

includes = cpp_extension.include_paths() + [sysconfig.get_paths()["include"]]
print(torch.__version__)
print(",".join(includes))
print(cpp_extension.library_paths()[0])
print(sysconfig.get_config_var("EXT_SUFFIX"))
