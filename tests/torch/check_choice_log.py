"""Reads a job's log (tests/torch/method_choice.py's) and checks what the
staged sites chose: every rank logged the same choices with the same agreed
timings, and as many as expected. Usage: check_choice_log.py LOG MEASURED STAGED
(MEASURED: sites whose choice was measured; STAGED: sites set up for copy
engines). Exit 0 when they hold, 1 with what differs."""

import re
import sys

SITE = r"((?:all_reduce|all_gather|reduce_scatter) of \d+ x \w+)"
CHOSEN = re.compile(r"rank (\d+)/local.*?" + SITE + r": (copy engines [\d.]+ ms, .*)$")
STAGED = re.compile(r"rank (\d+)/local.*?" + SITE + r" staged by copy engines \(")


def main():
    path, measured, staged = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    chosen, set_up = {}, {}
    with open(path, errors="replace") as f:
        for line in f:
            if m := CHOSEN.search(line):
                chosen.setdefault(m[1], {})[m[2]] = m[3]
            elif m := STAGED.search(line):
                set_up.setdefault(m[1], set()).add(m[2])
    bad = []
    ranks = sorted(set(chosen) | set(set_up))
    if len(ranks) < 2:
        bad.append(f"lines from ranks {ranks}, not from 2 or more")
    for r in ranks:
        if len(chosen.get(r, {})) != measured:
            bad.append(f"rank {r}: {len(chosen.get(r, {}))} sites chosen by measurement, "
                       f"not {measured}")
        if len(set_up.get(r, set())) != staged:
            bad.append(f"rank {r}: {len(set_up.get(r, set()))} sites staged, not {staged}")
        if chosen.get(r) != chosen.get(ranks[0]):
            bad.append(f"rank {r} chose {chosen.get(r)}, rank {ranks[0]} {chosen.get(ranks[0])}")
    for site, why in sorted(chosen.get(ranks[0], {}).items()) if ranks else ():
        print(f"choice: {site}: {why}")
    if bad:
        print("check_choice_log: " + "; ".join(bad))
        return 1
    print(f"check_choice_log: ok ({len(ranks)} ranks alike)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
