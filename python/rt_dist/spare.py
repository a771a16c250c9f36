"""A spare worker (``dtrun --spare-workers=N --recovery=in-process``).

dtrun starts it as ``python -m rt_dist.spare ARGS`` beside a job's workers,
with the ARGS a worker gets (``[-u] SCRIPT ...``, ``-m MODULE ...`` or ``-c
CODE ...``). It imports torch, what an optimizer imports when it is made
(torch._dynamo) and rt_dist.torch (and ``RTD_SPARE_IMPORTS``), and
initializes CUDA, then says it is ready (one byte, ``R``, on its socket to
dtrun, which makes no spare a worker before) and waits. When a worker
fails, dtrun sends the spare that worker's environment and two pipes for
its output; the spare takes them and runs the program as that worker
would from its first line, but with the seconds of the interpreter's start
and of ``import torch`` already spent. When dtrun ends, the socket closes
and the spare exits.

The message: 8 bytes (``RTDS``, then the environment's length, little
endian, both unsigned 32-bit) carrying the two pipes (SCM_RIGHTS), then the
environment as ``KEY=VALUE\\0`` entries.
"""

from __future__ import annotations

import importlib
import os
import runpy
import socket
import struct
import sys

from rt_dist import _config

__all__ = ["main"]

_MAGIC = b"RTDS"
_READY = b"R"  # to dtrun, once the imports are done
_MOST_ENV = 16 << 20  # bytes: dtrun's environments are kilobytes


class SpareError(RuntimeError):
    """What makes a spare unable to become a worker (the message says why)."""


def _program(args: list[str]) -> tuple[str, str, list[str], bool]:
    """(kind, target, argv, unbuffered) of `python [-u] SCRIPT|-m MOD|-c CODE ARGS`."""
    unbuffered = False
    while args and args[0] == "-u":
        unbuffered, args = True, args[1:]
    if not args:
        raise SpareError("rt_dist.spare: no program (give the worker's: SCRIPT, -m MODULE or "
                         "-c CODE, and its arguments)")
    if args[0] in ("-m", "-c"):
        if len(args) < 2:
            raise SpareError(f"rt_dist.spare: {args[0]} needs a value")
        argv = ["-c" if args[0] == "-c" else args[1], *args[2:]]
        return args[0], args[1], argv, unbuffered
    if args[0].startswith("-"):
        raise SpareError(f"rt_dist.spare: the interpreter option {args[0]} cannot be applied "
                         "to a spare that is already running: leave it out, or set it by its "
                         "environment variable (PYTHON...) for dtrun")
    return "script", args[0], list(args), unbuffered


def _preload() -> None:
    try:
        import torch
    except ImportError:
        torch = None  # a plain Python job: the interpreter's start is what is saved
    if torch is not None:
        import torch.distributed  # noqa: F401
        import torch.nn.parallel  # noqa: F401

        import rt_dist.torch  # noqa: F401

        # torch._dynamo: what every torch.optim optimizer imports when it is
        # made, and the meta device's to_empty after it (torch.fx's symbolic
        # shapes, sympy): seconds that a replacement would spend building
        # its optimizer, before its state can arrive. Ahead of time only: a
        # torch whose dynamo cannot be imported here fails the same way in
        # the worker's own code, which says so there.
        try:
            import torch._dynamo  # noqa: F401
        except Exception:  # noqa: BLE001, S110 - see above
            pass
        if torch.cuda.is_available():
            torch.cuda.init()
    for name in filter(None, (n.strip() for n in _config.text("RTD_SPARE_IMPORTS").split(","))):
        importlib.import_module(name)


def _receive(sock: socket.socket) -> tuple[dict[str, str], list[int]]:
    """Blocks until dtrun says whose worker this becomes (its socket closed: the
    job ended without needing this spare, which exits)."""
    head, fds, _, _ = socket.recv_fds(sock, 8, 2)
    if not head:
        raise SystemExit(0)  # dtrun ended without needing this spare
    while len(head) < 8:
        more = sock.recv(8 - len(head))
        if not more:
            raise SpareError("rt_dist.spare: dtrun's message ended inside its header")
        head += more
    magic, size = head[:4], struct.unpack("<I", head[4:])[0]
    if magic != _MAGIC or size > _MOST_ENV or len(fds) != 2:
        raise SpareError(f"rt_dist.spare: a malformed message from dtrun ({len(fds)} pipes, "
                         f"{size} bytes)")
    data = bytearray()
    while len(data) < size:
        more = sock.recv(min(size - len(data), 1 << 20))
        if not more:
            raise SpareError("rt_dist.spare: dtrun's message ended early")
        data += more
    env = {}
    for entry in bytes(data).split(b"\0"):
        if entry:
            key, sep, value = entry.decode("utf-8", "surrogateescape").partition("=")
            if not sep or not key:
                raise SpareError(f"rt_dist.spare: a malformed environment entry {entry[:40]!r}")
            env[key] = value
    return env, fds


def _become(env: dict[str, str], fds: list[int]) -> None:
    """Takes the worker's environment and output (the pipes dtrun made for it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, target in zip(fds, (1, 2), strict=True):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(env)


def _run(kind: str, target: str, argv: list[str], unbuffered: bool) -> None:
    if unbuffered:
        sys.stdout.reconfigure(write_through=True)
        sys.stderr.reconfigure(write_through=True)
    sys.argv = argv
    if kind == "-m":
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif kind == "-c":
        sys.path[0] = ""
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")


def main(args: list[str]) -> None:
    fd = _config.count("DTRUN_SPARE_FD", 1 << 20)
    if fd is None:
        raise SpareError("rt_dist.spare: DTRUN_SPARE_FD is not set: spares are started by "
                         "dtrun --spare-workers, not by hand")
    program = _program(args)
    os.environ.pop("DTRUN_SPARE_FD")
    sock = socket.socket(fileno=fd)
    _preload()
    try:
        sock.sendall(_READY)
    except OSError:
        raise SystemExit(0) from None  # dtrun ended while this spare was importing
    env, fds = _receive(sock)
    sock.close()
    _become(env, fds)
    _run(*program)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SpareError as e:
        print(e, file=sys.stderr)
        sys.exit(2)
