#!/usr/bin/env bash
# clang-format over our C++/CUDA sources. --check reports files that differ (exit 1); with
# no argument it rewrites them in place; with file arguments it rewrites only those (what an
# engineer sharing the tree wants: the others' uncommitted files stay as they are).
#   scripts/format.sh [--check] [file...]
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [[ "${1:-}" == "--check" ]]; then
  check=1
  shift
fi
if (($#)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files -co --exclude-standard -- 'src/*' 'tests/*' 'dev/*' \
    | grep -E '\.(h|hpp|cpp|cc|cu|cuh)$' | while read -r f; do [[ -f "$f" ]] && echo "$f"; done)
fi
((${#files[@]})) || exit 0
if ((check)); then
  clang-format --dry-run -Werror "${files[@]}"
else
  clang-format -i "${files[@]}"
fi
