# Sourced by every device call: the checkout on PYTHONPATH (the egg-info folders carried
# beside the sources register the entry points), gguf from /tmp/site, the staged model.
export PYTHONPATH=/tmp/site:$PWD/core/src:$PWD/backends/cuda/src:$PWD/backends/rocm/src:$PWD/backends/npu/src:$PWD/backends/xpu/src:$PWD/backends/musa/src
export GGUF=/root/stage/SmolLM2-135M-Instruct.Q4_1.gguf
export MTBENCH=$PWD/benchmarks/data/mt_bench_question.jsonl

eh() { python3 -m eagle_hal "$@"; }
