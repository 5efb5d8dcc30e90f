# Lease AM, call 2 (call 1 only staged the model's first half), commit 29b0943: join the
# model; adaptive vs plain at batch 16 and 64 (80 x 128) with prompts prefilled at a
# bucket settled at S = 0 deferring the draft's extend to the catch-up log (reverted after
# this lease: no gain within the noise, catch-ups of up to 23,167 tokens ran eagerly).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/am2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== sweep"; timeout 170 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 --max-new-tokens 128 --num-prompts 80 --batch-sizes 16,64 --modes plain,adaptive --no-split \
  --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; rm -f $O/*/*.png
