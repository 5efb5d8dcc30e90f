# Lease AZ, call 2 (call 1 = leaseAY_call1.sh without its tests: they passed in lease AY):
# join the model; issue 7's sweep with the adaptive mode's verify budget (lease AW, H100:
# 1.38 / 1.37 / 1.28 / 1.26x): 80 MT-bench first turns x 256 tokens, bf16, head D, plain and
# adaptive side by side at batch 1, 4, 16, 64, medians of 3 runs (the session's last 12
# device-minutes).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/az2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 420 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H --num-prompts 80 --max-new-tokens 256 --batch-sizes 1,4,16,64 \
  --modes plain,adaptive --repeats 3 --no-split --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror" | tail -16
rm -f $O/*/*.png
