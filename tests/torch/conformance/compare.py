"""Compares two verbose unittest logs of dist_suite.py (the reference's and
rtd's): prints each test whose result differs, and the counts of each.
Exits 1 when a test the reference passes does not pass on rtd."""

import re
import sys

def results(path):
    """{test name: ok, skip, error, fail or xfail} from a verbose unittest log."""
    found, pending = {}, None
    for line in open(path, errors="replace"):
        m = re.match(r"^(test_\w+) \(", line)
        if m:
            pending = m.group(1)
        if pending is None:
            continue
        t = line.rstrip()
        if t.endswith(" ok") or t == "ok":
            kind = "ok"
        elif " skipped " in t or t.startswith("skipped "):
            kind = "skip"
        elif t.endswith("ERROR"):
            kind = "error"
        elif t.endswith("FAIL"):
            kind = "fail"
        elif t.endswith("expected failure"):
            kind = "xfail"
        else:
            continue
        found[pending] = kind
        pending = None
    return found


def counts(r):
    c = {}
    for v in r.values():
        c[v] = c.get(v, 0) + 1
    return ", ".join(f"{k} {n}" for k, n in sorted(c.items()))


ref, ours = results(sys.argv[1]), results(sys.argv[2])
lost = []
for name in sorted(set(ref) | set(ours)):
    a, b = ref.get(name, "absent"), ours.get(name, "absent")
    if a != b:
        print(f"{name}: reference {a}, rtd {b}")
        if a == "ok":
            lost.append(name)
print(f"reference: {len(ref)} tests: {counts(ref)}")
print(f"rtd:       {len(ours)} tests: {counts(ours)}")
print(f"passing on the reference but not on rtd: {len(lost)}")
sys.exit(1 if lost else 0)
