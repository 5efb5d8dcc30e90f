# Lease C, call 4: with the better head on MT-bench chain accept (new vs shipped, call 3):
# fp32 lossless check, the batch sweep (plain vs adaptive), the attention micro-benchmark.
source tools/h200/env.sh
NEW=/root/train/eagle1-smollm2-135m-instruct; SHIPPED=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
HEAD=$(python3 - <<'PY'
import json, os
def chain(d):
    try:
        return next(r["accept_length"] for r in json.load(open(d + "/results.json"))["results"] if r["mode"] == "chain")
    except Exception:
        return 0.0
new, old = chain("/root/out/c3/new-graph"), chain("/root/out/c3/old-graph")
print("/root/train/eagle1-smollm2-135m-instruct" if new > old else "core/src/eagle_hal/data/eagle1-smollm2-135m-instruct")
PY
)
echo "head for call 4: $HEAD"; mkdir -p /root/out/c4; echo "$HEAD" > /root/out/c4/head.txt
export EAGLE_HAL_CHAIN_GRAPH=${EAGLE_HAL_CHAIN_GRAPH:-1}
timeout 120 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 10 --max-new-tokens 128 --batch-sizes 1 \
  --modes plain,chain,tree --dtype float32 --out /root/out/c4/fp32 2>&1 | grep -E "^bench: mode|tokens/s|same" | tail -8
timeout 300 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 32 --max-new-tokens 128 --batch-sizes 1,4,16,64 \
  --modes plain,adaptive --dtype bfloat16 --out /root/out/c4/sweep 2>&1 | grep -E "^bench: mode|tokens/s" | tail -16
timeout 90 python3 benchmarks/bench_attention.py > /root/out/c4/attention.txt 2>&1; tail -12 /root/out/c4/attention.txt
rm -f /root/out/c4/*/*.png
tar czf $OUT/c4.tgz -C /root/out c4
