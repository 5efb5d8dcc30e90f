# Lease BE, call 3 (within 30 s of call 2; the egg-infos): issue 7's "adaptive never slower
# than plain across batch sizes 1-64" with the shipped head F (lease AV measured head D):
# 80 MT-bench first turns x 256 tokens, bf16, plain and adaptive side by side, medians of 3.
source tools/h200/env.sh
[ -f "$GGUF" ] || { echo "model not staged"; exit 1; }
O=$OUT/be3; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
timeout 540 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H --num-prompts 80 --max-new-tokens 256 --batch-sizes 1,2,4,8,16,32,64 \
  --modes plain,adaptive --repeats 3 --no-split --out $O/sweep 2>&1 | grep -E "run [0-9]/|^bench: mode|tokens/s \(|rror" | tail -40
rm -f $O/*/*.png
