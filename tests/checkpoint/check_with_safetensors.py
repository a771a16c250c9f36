#!/usr/bin/env python3
"""Loads a consolidated checkpoint with the `safetensors` library itself
(safetensors.torch.load_file, and safetensors.numpy where torch is absent)
and compares every tensor, bit for bit, with the same tensor assembled from
the checkpoint's own files by read_safetensors.py's rules. Exits 77 where
the library is not installed.

    check_with_safetensors.py FILE.safetensors CHECKPOINT_DIR
"""
import json
import os
import sys


def assembled(ckpt):
    with open(os.path.join(ckpt, "manifest.json")) as f:
        manifest = json.load(f)
    sizes = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "bfloat16": 2, "float16": 2}
    out, files = {}, {}
    for t in manifest["tensors"]:
        size = sizes[t["dtype"]]
        count = 1
        for d in t["shape"]:
            count *= int(d)
        buf = bytearray(count * size)
        for p in t["pieces"]:
            name = manifest["files"][int(p.get("file", 0))]["name"]
            if name not in files:
                with open(os.path.join(ckpt, name), "rb") as f:
                    files[name] = f.read()
            first, n, off = int(p["first"]), int(p["count"]), int(p["offset"])
            buf[first * size:(first + n) * size] = files[name][off:off + n * size]
        out[t["name"]] = ([int(d) for d in t["shape"]], bytes(buf))
    return out


def main():
    path, ckpt = sys.argv[1], sys.argv[2]
    try:
        from safetensors.torch import load_file
        import torch  # noqa: F401
    except ImportError as e:
        print("SKIPPED: %s" % e)
        sys.exit(77)
    import safetensors
    tensors = load_file(path)
    expected = assembled(ckpt)
    if set(tensors) != set(expected):
        print("FAILED: names %s vs %s" % (sorted(tensors), sorted(expected)))
        sys.exit(1)
    for name, (shape, data) in expected.items():
        t = tensors[name]
        if list(t.shape) != shape or t.contiguous().view(-1).numpy().tobytes() != data:
            print("FAILED: %s differs (%s %s)" % (name, list(t.shape), t.dtype))
            sys.exit(1)
        print("ok: %s %s %s, first values %s" % (name, t.dtype, list(t.shape),
                                                 t.view(-1)[:3].tolist()))
    print("ok: safetensors %s (torch %s) loads all %d tensors, equal bit for bit"
          % (safetensors.__version__, torch.__version__, len(expected)))


if __name__ == "__main__":
    main()
