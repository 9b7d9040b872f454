#!/usr/bin/env bash
# Configures and builds hearth into build/ (Release; CUDA when nvcc is found).
# Extra arguments go to cmake's configure step, e.g. -DHEARTH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >/dev/null
# Progress lines are noise; errors and warnings still print.
cmake --build build -j"$(nproc)" 2>&1 | { grep -vE '^\[ *[0-9]+%\]' || true; }
