"""How fast the disk under DIR takes GB gigabytes written by THREADS threads in
pieces of 64 MiB, into one file or into FILES files (each piece to file
piece % FILES), then fsynced: whether a checkpoint's writer threads should
share a file.
    python3 bench/checkpoint/file_writers.py THREADS FILES GB DIR
On ext4, a file's buffered writes hold its inode's lock, so threads writing
one file take turns copying into the page cache.
"""

import os
import sys
import threading
import time

PIECE = 64 << 20


def main():
    threads, files, gb, where = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    data = os.urandom(PIECE)
    os.makedirs(where, exist_ok=True)
    fds = [os.open(os.path.join(where, f"f{i}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
           for i in range(files)]
    pieces = list(range((gb << 30) // PIECE))
    lock = threading.Lock()

    def work():
        while True:
            with lock:
                if not pieces:
                    return
                p = pieces.pop(0)
            os.pwrite(fds[p % files], data, (p // files) * PIECE)

    start = time.perf_counter()
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    written = time.perf_counter()
    for fd in fds:
        os.fsync(fd)
        os.close(fd)
    end = time.perf_counter()
    print(f"threads {threads} files {files}: write {written - start:.2f} s, fsync "
          f"{end - written:.2f} s, {(gb << 30) / (end - start) / 1e9:.2f} GB/s", flush=True)


if __name__ == "__main__":
    main()
