# Lease AO, call 2 (next session): join the model; issue 8's accept figures and issue 7's
# batch-1 speedups in ONE run next to plain decoding, each mode with its own settings
# (bench --modes kind:S..K..N..): 80 MT-bench first turns x 256 tokens, head D, bf16,
# medians of 3; the adaptive mode runs the controller with the long accept memory
# (commit 7ffb011, simulated only so far).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/ao2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== bs1, 80 prompts, every mode next to plain"; timeout 560 python3 -m eagle_hal bench --device cuda:0 --backend cuda \
  --model $GGUF --dataset $MTBENCH --dtype bfloat16 --draft $H --max-new-tokens 256 --num-prompts 80 --batch-sizes 1 \
  --modes plain,chain:S5,tree:S5K4N16,tree:S8K4N48,adaptive --repeats 3 --out $O/bs1 2>&1 \
  | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -14
rm -f $O/*/*.png
