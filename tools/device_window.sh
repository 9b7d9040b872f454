#!/usr/bin/env bash
# One GPU-machine call that runs everything a measurement window needs, from the bundles
# built here (tools/bench_gpu.sh bundle, tools/bench_cpu.sh bundle; carry .carry/gpu.tar.xz
# and .carry/cpu.tar.xz): the gpu gtests, the dev/cuda labs, the 8B product benchmarks (bf16
# and a 4-bit conversion) and the CPU benchmark, each step under its own time limit, logs in
# $OUT/window.tgz (the device returns at most 8 files). Usage: tools/device_window.sh [tests] [labs] [product] [nsys] [product4] [profile4] [cpu]
set -uo pipefail
cd "$(dirname "$0")/.."
final=${OUT:-/tmp}
out=/tmp/window-logs
rm -rf "$out" && mkdir -p "$out"
export OUT=$out
export PYTHONUNBUFFERED=1
# The gtests find fixtures through the source path compiled in (the lead's build worktree).
tar -C .carry -xJf .carry/gpu.tar.xz 2>/dev/null
src_dir=$(strings .carry/gpu/hearth_kernels_cuda_tests 2>/dev/null | grep -m1 -E '^/work/[a-z_-]+$')
if [[ -n "$src_dir" && ! -e "$src_dir" ]]; then mkdir -p "$(dirname "$src_dir")" && ln -s "$PWD" "$src_dir"; fi
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests labs product product4 cpu)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }
needs_model() { want product || want product4 || want profile4 || want nsys; }
if needs_model; then
  python3 dev/cuda/make_llama8b.py /tmp/llama8b > "$out/make_model.log" 2>&1 &
  maker=$!
fi
if want tests; then
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)
  LD_LIBRARY_PATH="$PWD/.carry/gpu/lib:/usr/local/cuda/lib64:${cublas_dir}" timeout 180 \
    .carry/gpu/hearth_kernels_cuda_tests --gtest_brief=1 > "$out/tests.log" 2>&1
  echo "tests rc=$?" | tee -a "$out/tests.log"
  grep -E "PASSED|FAILED" "$out/tests.log" | head -20
fi
# LABS="a b": only those labs, in that order (default: every bundled lab).
# shellcheck disable=SC2086
want labs && { timeout "${LABS_TIMEOUT:-300}" bash tools/bench_gpu.sh labs ${LABS:-} > /dev/null 2>&1; grep "rc=" "$out/labs.log"; }
if needs_model; then
  wait "$maker"
  tail -1 "$out/make_model.log"
fi
want product && { timeout 300 bash tools/bench_gpu.sh product > /dev/null 2>&1; echo "product rc=$?"; }
# A profile of the 64-concurrent engine benchmark (kernel and API summaries), where nsys exists.
if want nsys; then
  nsys_bin=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  if [[ -n "$nsys_bin" ]]; then
    cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)
    LD_LIBRARY_PATH="$PWD/.carry/gpu/lib:/usr/local/cuda/lib64:${cublas_dir}" timeout 240 \
      "$nsys_bin" profile -o /tmp/engine64 --force-overwrite true --stats=true \
      .carry/gpu/hearth benchmark /tmp/llama8b --device cuda --prompt-tokens 128 --tokens 128 \
      --runs 1 --concurrency 64 > "$out/nsys.log" 2>&1
    echo "nsys rc=$?"
  else
    echo "no nsys on this machine" | tee "$out/nsys.log"
  fi
fi
want product4 && { timeout 300 bash tools/bench_gpu.sh product4 > /dev/null 2>&1; echo "product4 rc=$?"; }
want profile4 && { timeout 420 bash tools/bench_gpu.sh profile4 > /dev/null 2>&1; echo "profile4 rc=$?"; }
if want cpu; then
  rm -rf /tmp/llama8b /tmp/llama8b-q4  # the CPU run needs the page cache and disk, not these
  mkdir -p "$out/cpu"
  OUT=$out/cpu DEADLINE=150 STEP_TIMEOUT=60 timeout 240 bash tools/bench_cpu.sh run \
    > "$out/cpu/console.log" 2>&1
  echo "cpu rc=$?"
fi
tar -C "$(dirname "$out")" -czf "$final/window.tgz" "$(basename "$out")"
ls -R "$out" | head -40
