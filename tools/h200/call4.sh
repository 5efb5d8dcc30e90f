# Call 4: benchmarks with the trained head (MT-bench first turns, SmolLM2-135M-Instruct).
source tools/h200/env.sh
HEAD=/root/train/eagle1-smollm2-135m-instruct
mkdir -p $OUT/bench
# bf16, batch 1, all modes, HF baseline in the same run
timeout 240 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 10 --max-new-tokens 256 --batch-sizes 1 \
  --modes plain,chain,tree,adaptive --hf-baseline --dtype bfloat16 --out $OUT/bench/bs1-bf16 2>&1 | grep -v USDT | tail -25
# fp32 lossless: speculative vs plain token for token
timeout 120 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 10 --max-new-tokens 128 --batch-sizes 1 --no-split \
  --modes plain,chain,tree --dtype float32 --out $OUT/bench/bs1-fp32 2>&1 | grep -v USDT | tail -12
# batch sweep: adaptive against plain
timeout 200 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 64 --max-new-tokens 128 --batch-sizes 1,4,16,64 --no-split \
  --modes plain,adaptive --dtype bfloat16 --out $OUT/bench/sweep-bf16 2>&1 | grep -v USDT | tail -15
