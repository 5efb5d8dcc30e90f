# Lease E, call 3: the CUDA conformance suite, the float32 lossless check (10 prompts x 128),
# and the adaptive batch sweep (batch 4 and 16) with the per-bucket warm-up.
source tools/h200/env.sh
O=/root/out/e3; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
timeout 170 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $O/cuda.json > $O/conformance.txt 2>&1; echo "conformance rc $?"
grep -E "fail |RESULT|total" $O/conformance.txt | tail -6
timeout 100 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $H --dataset $MTBENCH \
  --num-prompts 10 --max-new-tokens 128 --batch-sizes 1 --dtype float32 --modes plain,chain,tree --out $O/fp32 2>&1 \
  | grep -E "^bench: mode|tokens/s|rror" | tail -8
timeout 120 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $H --dataset $MTBENCH \
  --num-prompts 32 --max-new-tokens 128 --batch-sizes 4,16 --dtype bfloat16 --modes plain,adaptive --out $O/sweep 2>&1 \
  | grep -E "^bench: mode|tokens/s|rror" | tail -12
rm -f $O/*/*.png
tar czf $OUT/e3.tgz -C /root/out e3

