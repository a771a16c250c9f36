#!/usr/bin/env bash
# Keeps a run's raw results in this repository's history without leaving
# them in its tree: one commit adds DIR's files as results/NAME/, the next
# removes them, and the first one's hash is what claims and docs cite:
#   bench/keep_results.sh DIR NAME      (NAME: e.g. 2026-12-02-h200-torch-dcp)
# prints REV:results/NAME/, to read with `git show REV:results/NAME/README.md`
# or `git archive REV results/NAME | tar -x`. Only those files are
# committed; whatever else is staged or changed stays as it was.
set -euo pipefail
src=${1:?usage: bench/keep_results.sh DIR NAME}
name=${2:?usage: bench/keep_results.sh DIR NAME}
[ -d "$src" ] || { echo "keep_results: $src is not a directory" >&2; exit 2; }
case "$name" in
  */* | .* | "") echo "keep_results: NAME must be one plain folder name, not '$name'" >&2; exit 2 ;;
esac
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
dest=results/$name
cd "$root"
[ ! -e "$dest" ] || { echo "keep_results: $dest exists already" >&2; exit 2; }
if ! git diff --cached --quiet; then
  echo "keep_results: something is staged already; commit or unstage it first" >&2
  exit 2
fi
mkdir -p results
cp -r "$src" "$dest"
git add -f "$dest"
git commit -q -m "results: $name (raw files, removed from the tree by the next commit)" -- "$dest"
rev=$(git rev-parse --short=7 HEAD)
git rm -r -q "$dest"
git commit -q -m "results: $name kept in the history as $rev:$dest/" -- "$dest"
rmdir results 2>/dev/null || true
echo "$rev:$dest/"
