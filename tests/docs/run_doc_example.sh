#!/usr/bin/env bash
# Runs a documentation example as it is written: the first ```python block
# after HEADING in DOC, under dtrun with N workers, in an empty directory;
# passes when it exits 0 and its output holds EXPECT. FLAGS: dtrun's own.
#   tests/docs/run_doc_example.sh PYTHON DTRUN DOC HEADING N EXPECT [FLAGS...]
# Exits 77 (skipped) when PYTHON has no torch.
set -u
python=$1 dtrun=$2 doc=$3 heading=$4 n=$5 expect=$6
shift 6
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../torch/need_torch.sh"
need_torch "$python"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$python" - "$doc" "$heading" "$work/example.py" <<'PY' || exit 1
import sys
doc, heading, out = sys.argv[1:4]
text = open(doc).read()
at = text.find("\n" + heading + "\n")
if at < 0:
    sys.exit(f"FAILED: no heading {heading!r} in {doc}")
start = text.find("```python\n", at)
end = text.find("```\n", start + 10)
if start < 0 or end < 0:
    sys.exit(f"FAILED: no python block after {heading!r} in {doc}")
open(out, "w").write(text[start + 10:end])
PY
cd "$work" || exit 1
export TORCH_CPP_LOG_LEVEL=ERROR PYTHONWARNINGS=ignore
timeout 300 "$dtrun" --nproc-per-node="$n" "$@" "$python" example.py >log 2>&1
rc=$?
cat log
[ $rc -eq 0 ] || { echo "FAILED: the example exited $rc"; exit 1; }
grep -qF -- "$expect" log || { echo "FAILED: its output does not hold '$expect'"; exit 1; }
echo "ok: the example in $(basename "$doc") under '$heading' runs as written"
