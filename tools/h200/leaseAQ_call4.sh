# Lease AQ, call 4 (not run yet): heads D (shipped, EAGLE-1) and E3 (EAGLE-3) side by side
# next to plain decoding, batch 1, 80 MT-bench first turns x 256 tokens, bf16, one run.
source tools/h200/env.sh
O=$OUT/aq4; mkdir -p $O
D=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
for head in $D /root/train/headE3; do
  name=$(basename $head)
  timeout 280 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
    --dtype bfloat16 --draft $head --max-new-tokens 256 --num-prompts 80 --batch-sizes 1 \
    --modes plain,chain:S5,tree:S5K4N16,tree:S8K4N48 --draft-vocab full --repeats 1 --no-split \
    --out $O/$name 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -10; rm -f $O/$name/*.png
done
