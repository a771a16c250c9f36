"""ctypes bindings of librt_dist's C interface (runtime/include/rt_dist/c_api.h).

The library is found, in order: $RTD_LIBRARY; the path the build or the
install wrote into _paths.py; beside this package in an installed tree
(<prefix>/lib/python3/dist-packages/rt_dist -> <prefix>/lib); the loader's
own search (LD_LIBRARY_PATH, ld.so.conf).
"""

import ctypes
import os

from rt_dist import _config
from rt_dist._codes import (  # noqa: F401  (re-exported: the interface's numbers)
    AVG, BFLOAT16, FLOAT16, FLOAT32, FLOAT64, INT32, INT64, MAX, MIN, OP_ALL_GATHER,
    OP_ALL_REDUCE, OP_BROADCAST, OP_RECV, OP_REDUCE_SCATTER, OP_SEND, SUM)

API_VERSION = 10

# rtd::ErrorCategory's order, plus one (0: no error).
CATEGORIES = ("", "invalid argument", "configuration", "network", "timeout", "backend", "internal")


class RtdError(RuntimeError):
    """A librt_dist failure; `category` is one of CATEGORIES."""

    def __init__(self, message, category=""):
        super().__init__(message)
        self.category = category


class TimeoutError_(RtdError):
    pass


_c_int64 = ctypes.c_int64
_p = ctypes.c_void_p

SET = ctypes.CFUNCTYPE(ctypes.c_int, _p, ctypes.c_char_p, _p, ctypes.c_size_t)
GET = ctypes.CFUNCTYPE(ctypes.c_int, _p, ctypes.c_char_p, _c_int64, _p)
ADD = ctypes.CFUNCTYPE(ctypes.c_int, _p, ctypes.c_char_p, _c_int64, ctypes.POINTER(_c_int64))
CHECK = ctypes.CFUNCTYPE(ctypes.c_int, _p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int))
FAILURE_FN = ctypes.CFUNCTYPE(None, _p)  # rtd_comm_on_failure's fn
REMOVE = ctypes.CFUNCTYPE(ctypes.c_int, _p, ctypes.c_char_p)


class StoreOps(ctypes.Structure):
    _fields_ = [("self", _p), ("set", SET), ("get", GET), ("add", ADD), ("check", CHECK),
                ("remove", REMOVE)]


class Op(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("input", _p), ("output", _p), ("count", _c_int64),
                ("dtype", ctypes.c_int), ("op", ctypes.c_int), ("peer", ctypes.c_int)]


class AdamWTensor(ctypes.Structure):
    """rtd_adamw_tensor: one tensor's step of the host AdamW."""
    _fields_ = [("param", _p), ("grad", _p), ("grad_dtype", ctypes.c_int), ("exp_avg", _p),
                ("exp_avg_sq", _p), ("count", _c_int64), ("step", _c_int64),
                ("lr", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float),
                ("grad_scale", ctypes.c_float)]


class CkptRange(ctypes.Structure):
    """rtd_ckpt_range: elements [first, first + count) of a flattened tensor, at data."""
    _fields_ = [("first", _c_int64), ("count", _c_int64), ("data", _p), ("device", ctypes.c_int)]


class CkptTensor(ctypes.Structure):
    """rtd_ckpt_tensor: a tensor's name, dtype, global shape and this rank's ranges."""
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.POINTER(_c_int64)), ("n_ranges", _c_int64),
                ("ranges", ctypes.POINTER(CkptRange))]


class CkptOptions(ctypes.Structure):
    _fields_ = [("dir", ctypes.c_char_p), ("keep_last", ctypes.c_int),
                ("io_threads", ctypes.c_int), ("piece_bytes", _c_int64)]


META_FN = ctypes.CFUNCTYPE(None, _p, ctypes.c_char_p, ctypes.c_char_p)  # rtd_ckpt_load's on_meta


def _candidates():
    explicit = _config.text("RTD_LIBRARY") or None
    if explicit:
        yield explicit
        return
    try:
        from rt_dist import _paths  # written by the build and by cmake --install
        yield _paths.LIBRARY
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    for up in ("../../..", "../../../.."):
        yield os.path.normpath(os.path.join(here, up, "librt_dist.so.0"))
    yield "librt_dist.so.0"


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        version = lib.rtd_c_api_version()
        if version != API_VERSION:
            raise ImportError(
                f"{path} offers the C interface version {version}, this package needs "
                f"{API_VERSION}: install librt_dist and the rt_dist package of the same release")
        return lib
    raise ImportError("librt_dist was not found; set RTD_LIBRARY to its path (tried: "
                      + "; ".join(tried) + ")")


def _declare(lib):
    w, c = _p, _p  # rtd_work*, rtd_comm*
    i, i64 = ctypes.c_int, _c_int64
    sig = {
        "rtd_last_error": (ctypes.c_char_p, []),
        "rtd_last_error_category": (i, []),
        "rtd_store_reply": (None, [_p, _p, ctypes.c_size_t]),
        "rtd_comm_create": (c, [ctypes.POINTER(StoreOps), ctypes.c_char_p, ctypes.c_char_p, i, i,
                                i, ctypes.c_char_p, i64, i]),
        "rtd_comm_destroy": (None, [c]),
        "rtd_comm_abort": (None, [c]),
        "rtd_comm_failed": (i, [c]),
        "rtd_comm_on_failure": (None, [c, _p, _p]),  # fn: a FAILURE_FN cast, or None
        "rtd_comm_stream": (_p, [c]),
        "rtd_all_reduce": (w, [c, _p, _p, i64, i, i, i, _p]),
        "rtd_broadcast": (w, [c, _p, i64, i, i, i, _p]),
        "rtd_all_gather": (w, [c, _p, _p, i64, i, i, _p]),
        "rtd_reduce_scatter": (w, [c, _p, _p, i64, i, i, i, _p]),
        "rtd_all_to_all": (w, [c, _p, _p, i64, i, i, _p]),
        "rtd_barrier": (w, [c, _p]),
        "rtd_send": (w, [c, _p, i64, i, i, i, i, _p]),
        "rtd_recv": (w, [c, _p, i64, i, i, i, i, _p]),
        "rtd_group": (w, [c, ctypes.POINTER(Op), i, i, _p]),
        "rtd_work_done": (i, [w]),
        "rtd_work_wait": (i, [w, i64]),
        "rtd_work_wait_stream": (i, [w, _p]),
        "rtd_work_error": (i, [w]),
        "rtd_work_free": (None, [w]),
        "rtd_persistent_all_reduce": (_p, [c, _p, i64, i, i, i, i]),
        "rtd_persistent_run": (w, [_p, _p]),
        "rtd_persistent_method": (ctypes.c_char_p, [_p]),
        "rtd_persistent_free": (None, [_p]),
        "rtd_persistent_all_gather": (_p, [c, _p, i64, i, i, i]),
        "rtd_persistent_reduce_scatter": (_p, [c, _p, i64, i, i, i, i]),
        "rtd_persistent_shard_run": (w, [_p, _p, _p, i64, _p]),
        "rtd_persistent_gathers_blocks": (i, [_p]),
        "rtd_persistent_sources_unchanged": (i, [_p]),
        "rtd_persistent_gather_blocks": (w, [_p, ctypes.POINTER(_p), ctypes.POINTER(i64), i, _p]),
        "rtd_host_adamw_create": (_p, [i]),
        "rtd_host_adamw_step": (i, [_p, ctypes.POINTER(AdamWTensor), i64]),
        "rtd_host_adamw_kernel": (ctypes.c_char_p, [_p]),
        "rtd_host_adamw_destroy": (None, [_p]),
        "rtd_ckpt_create": (_p, [ctypes.POINTER(StoreOps), i, i, ctypes.POINTER(CkptOptions)]),
        "rtd_ckpt_save": (i, [_p, i64, ctypes.POINTER(CkptTensor), i64,
                              ctypes.POINTER(ctypes.c_char_p), i64]),
        "rtd_ckpt_load": (i, [_p, ctypes.POINTER(CkptTensor), i64, i64, i,
                              ctypes.POINTER(i64), META_FN, _p]),
        "rtd_ckpt_destroy": (None, [_p]),
        "rtd_ckpt_read_manifest": (_p, [ctypes.c_char_p, i64, ctypes.POINTER(i64)]),
        "rtd_free": (None, [_p]),
    }
    for name, (restype, argtypes) in sig.items():
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = argtypes
    return lib


lib = _declare(_load())


def last_error():
    """The calling thread's last failure as an RtdError (TimeoutError_ for timeouts)."""
    message = lib.rtd_last_error().decode(errors="replace")
    category = CATEGORIES[lib.rtd_last_error_category()] if lib.rtd_last_error_category() < len(
        CATEGORIES) else "internal"
    cls = TimeoutError_ if category == "timeout" else RtdError
    return cls(message or "librt_dist failed without a message", category)
