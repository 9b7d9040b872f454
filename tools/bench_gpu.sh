#!/usr/bin/env bash
# CUDA kernel tests + kernel-lab benchmark on the GPU machine, from binaries built here.
#   tools/bench_gpu.sh bundle [build-dir]   (here) copy the gpu executables and the
#                                           non-system shared libs they need to .carry/gpu
#   tools/bench_gpu.sh run [bench-args]     (GPU machine, repo root) run them, logs to $OUT
#   tools/bench_gpu.sh model [dir]          (GPU machine) make the ANCHORS.md Llama-3.1-8B-shaped
#                                           random model with transformers, time it end to end
# The GPU machine has the CUDA runtime and cuBLASLt but not Debian's -dev libraries; the
# bundle travels as .carry/gpu.tar.xz (carry that path).
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=.carry/gpu
unpack() {
  [[ -x "$bundle/hearth_kernels_cuda_tests" ]] && return
  tar -C .carry -xJf .carry/gpu.tar.xz ||
    python3 -c 'import tarfile; tarfile.open(".carry/gpu.tar.xz").extractall(".carry")'
}
case "${1:-}" in
  bundle)
    build=${2:-build-cuda}
    rm -rf "$bundle" && mkdir -p "$bundle/lib"
    for exe in hearth_kernels_cuda_tests hearth_cuda_bench hearth_cuda_bench_model; do
      cp "$build/tests/kernels/cuda/$exe" "$bundle/"
      ldd "$build/tests/kernels/cuda/$exe" | awk '$3 ~ /^\// {print $3}' |
        grep -vE 'libc\.so|libm\.so|libdl|libpthread|librt|ld-linux|libgcc_s|libstdc\+\+|libcuda|libcublas' |
        xargs -r -I{} cp -L {} "$bundle/lib/"
    done
    # The device tree travels under 64 MiB in all: ship the bundle xz-compressed.
    tar -C .carry -cf - gpu | xz -9 -T2 > .carry/gpu.tar.xz
    du -sh "$bundle" .carry/gpu.tar.xz
    ;;
  run)
    shift
    unpack
    out=${OUT:-/tmp/hearth-gpu}
    mkdir -p "$out"
    cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)
    export LD_LIBRARY_PATH="$PWD/$bundle/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv \
      2>&1 | tee "$out/device.log"
    "$bundle/hearth_kernels_cuda_tests" --gtest_brief=1 2>&1 | tee "$out/tests.log"
    tests_rc=${PIPESTATUS[0]}
    "$bundle/hearth_cuda_bench" "$@" 2>&1 | tee "$out/bench.log"
    bench_rc=${PIPESTATUS[0]}
    echo "tests rc=$tests_rc bench rc=$bench_rc"
    ;;
  model)
    unpack
    out=${OUT:-/tmp/hearth-gpu}
    dir=${2:-/tmp/llama8b}
    mkdir -p "$out"
    cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)
    export LD_LIBRARY_PATH="$PWD/$bundle/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
    [[ -f "$dir/config.json" ]] || python3 dev/cuda/make_llama8b.py "$dir" 2>&1 | tail -3 | tee "$out/make_model.log"
    cat "$dir"/*.safetensors > /dev/null  # warm page cache, as the anchors' peers had
    "$bundle/hearth_cuda_bench_model" "$dir" 128 128 4096 2>&1 | tee "$out/model.log"
    ;;
  *)
    echo "usage: $0 bundle [build-dir] | run [all|kernels|model] | model [dir]" >&2
    exit 2
    ;;
esac
