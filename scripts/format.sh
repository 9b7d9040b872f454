#!/usr/bin/env bash
# clang-format over our C++/CUDA sources. --check reports files that differ (exit 1);
# with no argument it rewrites them in place.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -co --exclude-standard -- 'src/*' 'tests/*' 'dev/*' \
  | grep -E '\.(h|hpp|cpp|cc|cu|cuh)$' | while read -r f; do [[ -f "$f" ]] && echo "$f"; done)
((${#files[@]})) || exit 0
if [[ "${1:-}" == "--check" ]]; then
  clang-format --dry-run -Werror "${files[@]}"
else
  clang-format -i "${files[@]}"
fi
