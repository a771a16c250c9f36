#!/usr/bin/env python3
"""The disk's floor for offload nvme: a file in DIR written, then read, with
O_DIRECT in 8 MiB requests from 1, 2, 4, ... THREADS threads at once (as the
states file is moved); prints GB/s and a RESULT line each. Times only.

  bench/disk_copy.py DIR [GIB] [THREADS]
"""
import mmap
import os
import sys
import threading
import time

REQUEST = 8 << 20


def run(path, total, threads, write):
    flags = os.O_RDWR | os.O_DIRECT | (os.O_CREAT if write else 0)
    fd = os.open(path, flags, 0o600)
    requests = total // REQUEST
    next_request = [0]
    lock = threading.Lock()

    def worker():
        buf = mmap.mmap(-1, REQUEST)  # page-aligned, as O_DIRECT needs
        buf.write(b"\x5a" * REQUEST)
        view = memoryview(buf)
        while True:
            with lock:
                k = next_request[0]
                next_request[0] += 1
            if k >= requests:
                break
            if write:
                os.pwrite(fd, view, k * REQUEST)
            else:
                os.preadv(fd, [view], k * REQUEST)
        view.release()
        buf.close()

    start = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if write:
        os.fsync(fd)
    seconds = time.perf_counter() - start
    os.close(fd)
    return total / seconds / 1e9


def main():
    directory = sys.argv[1]
    gib = float(sys.argv[2]) if len(sys.argv) > 2 else 4
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    total = int(gib * (1 << 30)) // REQUEST * REQUEST
    path = os.path.join(directory, "disk_copy.bin")
    try:
        for n in [t for t in (1, 2, 4, 8, 16, 32) if t < threads] + [threads]:
            w = run(path, total, n, True)
            r = run(path, total, n, False)
            print(f"{n:2d} thread(s), {total / 1e9:.1f} GB, O_DIRECT 8 MiB: "
                  f"write {w:.2f} GB/s, read {r:.2f} GB/s")
            print(f"RESULT disk threads={n} write_gbs={w:.3f} read_gbs={r:.3f}")
    finally:
        if os.path.exists(path):
            os.unlink(path)


if __name__ == "__main__":
    main()
