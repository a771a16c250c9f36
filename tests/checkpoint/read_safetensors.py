#!/usr/bin/env python3
"""Checks a safetensors file that rtd-ckpt consolidated, with a reader that is
not ours (the standard library only): the header's layout (8-byte length,
JSON, contiguous data offsets, dtype codes), then every tensor's bytes
against the same tensor assembled from the checkpoint's own files as its
manifest.json describes them.

    read_safetensors.py FILE.safetensors CHECKPOINT_DIR
"""
import json
import os
import struct
import sys

SIZES = {"F32": 4, "F64": 8, "I32": 4, "I64": 8, "BF16": 2, "F16": 2}
CODES = {"float32": "F32", "float64": "F64", "int32": "I32", "int64": "I64",
         "bfloat16": "BF16", "float16": "F16"}


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


def main():
    path, ckpt = sys.argv[1], sys.argv[2]
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length).decode("utf-8"))
        blob = f.read()
    if (8 + length) % 8 != 0:
        fail("the data does not start on 8 bytes")
    meta = header.pop("__metadata__", {})
    spans = sorted(tuple(h["data_offsets"]) for h in header.values())
    end = 0
    for begin, stop in spans:
        if begin != end:
            fail("data offsets are not contiguous at %d" % begin)
        end = stop
    if end != len(blob):
        fail("the data is %d bytes, the header says %d" % (len(blob), end))

    with open(os.path.join(ckpt, "manifest.json")) as f:
        manifest = json.load(f)
    if meta.get("step") != str(manifest["step"]):
        fail("metadata step %r, the manifest's %r" % (meta.get("step"), manifest["step"]))
    files = {}
    for tensor in manifest["tensors"]:
        name = tensor["name"]
        entry = header.get(name)
        if entry is None:
            fail("tensor %r is missing" % name)
        code = CODES[tensor["dtype"]]
        if entry["dtype"] != code:
            fail("%s: dtype %s, expected %s" % (name, entry["dtype"], code))
        shape = [int(d) for d in tensor["shape"]]
        if entry["shape"] != shape:
            fail("%s: shape %s, expected %s" % (name, entry["shape"], shape))
        size = SIZES[code]
        count = 1
        for d in shape:
            count *= d
        expected = bytearray(count * size)
        for piece in tensor["pieces"]:
            file_name = manifest["files"][int(piece.get("file", 0))]["name"]
            if file_name not in files:
                with open(os.path.join(ckpt, file_name), "rb") as f:
                    files[file_name] = f.read()
            first, n, offset = int(piece["first"]), int(piece["count"]), int(piece["offset"])
            expected[first * size:(first + n) * size] = files[file_name][offset:offset + n * size]
        begin, stop = entry["data_offsets"]
        if blob[begin:stop] != bytes(expected):
            fail("%s: the bytes differ from the checkpoint's pieces" % name)
        values = struct.unpack("<%d%s" % (min(count, 3), "f" if code == "F32" else "q"),
                               blob[begin:begin + min(count, 3) * size]) \
            if code in ("F32", "I64") else ()
        print("ok: %s %s %s %s" % (name, code, shape, list(values)))
    print("ok: %d tensors match the checkpoint, step %s" % (len(manifest["tensors"]), meta["step"]))


if __name__ == "__main__":
    main()
