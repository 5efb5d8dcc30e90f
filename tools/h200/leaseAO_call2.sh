# Lease AO, call 2 (next session): join the model; issue 8's accept figures and issue 7's
# batch-1 speedups in ONE run next to plain decoding, each mode with its own settings
# (bench --modes kind:S..K..N..V..): 80 MT-bench first turns x 256 tokens, head D, bf16,
# medians of 3. V8192: the draft drafts from the 8,192 most frequent tokens of its
# draft_vocab.json (sixteenth session; CPU: chain 0.74x -> 1.04x, tree 0.82x -> 1.25x
# plain); --draft-vocab full keeps the other modes on the whole vocabulary, so each pair
# is the same head with and without the draft vocabulary, side by side.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/ao2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== bs1, 80 prompts, every mode next to plain"; timeout 570 python3 -m eagle_hal bench --device cuda:0 --backend cuda \
  --model $GGUF --dataset $MTBENCH --dtype bfloat16 --draft $H --max-new-tokens 256 --num-prompts 80 --batch-sizes 1 \
  --draft-vocab full --modes plain,chain:S5,chain:S5V8192,tree:S5K4N16,tree:S5K4N16V8192,tree:S8K4N48,tree:S8K4N48V8192 \
  --repeats 3 --no-split --out $O/bs1 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -16
rm -f $O/*/*.png
