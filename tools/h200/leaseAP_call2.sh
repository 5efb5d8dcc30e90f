# Lease AP, call 2: join the model; the adaptive mode at batch 64 over a longer run than
# lease AO's (80 x 512 tokens instead of 80 x 128, whose 0.4 s runs spread +-12 %), next to
# plain decoding and a fixed tree, with the per-phase split pass; and the draft vocabulary
# that `auto` picks on the CUDA backend (the status line of generate).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/ap2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== generate, default draft vocabulary"; timeout 120 python3 -m eagle_hal generate --device cuda:0 --dtype bfloat16 \
  --model $GGUF --max-new-tokens 32 --prompt "Why is the sky blue?" > $O/generate.txt 2>&1; grep -iE "draft|tokens/s" $O/generate.txt | head -4
echo "== bs64, 80 x 512"; timeout 400 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H --max-new-tokens 512 --num-prompts 80 --batch-sizes 64 --modes plain,adaptive,tree:S3K4N16 \
  --repeats 3 --out $O/bs64 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -12; rm -f $O/*/*.png
