#!/usr/bin/env bash
# The GPU figures of the README, reproduced on any machine with an NVIDIA GPU and eagle-hal
# (with eagle-hal-cuda, transformers and gguf) installed:
#
#   bash benchmarks/gpu_suite.sh [MODEL] [OUTDIR]
#
# MODEL: a GGUF file or Hugging Face directory ("default": the default model, SmolLM2-135M-
# Instruct Q4_1). OUTDIR (default gpu-suite-out): conformance report, machine description and
# one results.json per table (bs1/, bs64/), the raw results the README's GPU tables quote.
# DEVICE (default cuda:0) and BACKEND (default cuda) pick the card and backend; STEPS picks
# which parts run (default "conformance bs1 bs64").
set -euo pipefail
cd "$(dirname "$0")/.."

model=${1:-default}
out=${2:-gpu-suite-out}
device=${DEVICE:-cuda:0}
backend=${BACKEND:-cuda}
steps=${STEPS:-conformance bs1 bs64}
mkdir -p "$out"

if command -v eagle-hal >/dev/null 2>&1; then eh() { eagle-hal "$@"; }; else eh() { python3 -m eagle_hal "$@"; }; fi
model_args=()
[[ $model == default ]] || model_args=(--model "$model")
dataset=benchmarks/data/mt_bench_question.jsonl

python3 - "$out/machine.json" <<'PY'
import json, platform, sys
import torch
info = {"python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
try:
    import triton
    info["triton"] = triton.__version__
except ImportError:
    info["triton"] = None
try:
    import transformers
    info["transformers"] = transformers.__version__
except ImportError:
    info["transformers"] = None
json.dump(info, open(sys.argv[1], "w"), indent=2)
print(info)
PY

for step in $steps; do
  case $step in
    conformance)
      eh conformance --device "$device" --backend "$backend" --report "$out/conformance-$backend.json" ;;
    bs1)   # batch 1: every mode next to plain decoding and HF transformers generate
      eh bench --device "$device" --backend "$backend" "${model_args[@]}" --dtype bfloat16 \
        --dataset "$dataset" --num-prompts 80 --max-new-tokens 128 --batch-sizes 1 \
        --modes plain,chain:S5,tree:S5K4N16,tree:S8K4N48,adaptive --draft-vocab full \
        --repeats 3 --no-split --hf-baseline --out "$out/bs1" ;;
    bs64)  # batch 64: the serving regime
      eh bench --device "$device" --backend "$backend" "${model_args[@]}" --dtype bfloat16 \
        --dataset "$dataset" --num-prompts 80 --max-new-tokens 128 --batch-sizes 64 \
        --modes plain,chain:S3,tree:S3K4N16,adaptive --draft-vocab full \
        --repeats 3 --no-split --out "$out/bs64" ;;
    *) echo "unknown step '$step' (known: conformance bs1 bs64)" >&2; exit 2 ;;
  esac
done
echo "results under $out"
