# Lease 3, call 2: stage the model, then the adaptive-vs-plain batch sweep with the shipped head.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
HEAD=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
timeout 200 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 32 --max-new-tokens 128 --batch-sizes 1,4,16,64 --no-split \
  --modes plain,adaptive --dtype bfloat16 --out $OUT/sweep-bf16 2>&1 | grep -E "^bench|tokens/s"
rm -f $OUT/*/*.png
