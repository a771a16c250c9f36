#!/usr/bin/env bash
# STYLE.md 3.5: the C++ and CUDA sources follow .clang-format (Google, 100 columns).
set -u
root=$1
command -v clang-format >/dev/null || { echo "SKIPPED: clang-format is not installed"; exit 77; }
cd "$root" || exit 1
files=$(git ls-files '*.cc' '*.h' '*.cu' 2>/dev/null)
[ -n "$files" ] || { echo "SKIPPED: not a git checkout"; exit 77; }
# shellcheck disable=SC2086
if ! clang-format --dry-run -Werror $files; then
  echo "format: run 'clang-format -i' on the files above"
  exit 1
fi
echo "format: ok"
