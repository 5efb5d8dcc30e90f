# Lease 2, call 3: benchmarks with the shipped head, the profile, the SamplingOps timings.
source tools/h200/env.sh
HEAD=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
mkdir -p $OUT/bench $OUT/profile
timeout 130 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 10 --max-new-tokens 256 --batch-sizes 1 \
  --modes plain,chain,tree,adaptive --dtype bfloat16 --out $OUT/bench/bs1-bf16 2>&1 | grep -E "^bench|tokens/s" 
timeout 60 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 10 --max-new-tokens 128 --batch-sizes 1 --no-split \
  --modes plain,chain,tree --dtype float32 --out $OUT/bench/bs1-fp32 2>&1 | grep -E "^bench|tokens/s"
timeout 110 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 32 --max-new-tokens 128 --batch-sizes 1,4,16,64 --no-split \
  --modes plain,adaptive --dtype bfloat16 --out $OUT/bench/sweep-bf16 2>&1 | grep -E "^bench|tokens/s"
rm -f $OUT/bench/*/*.png  # the file count is limited; plots are redrawn here from results.json
timeout 60 python3 benchmarks/profile_decode.py --device cuda:0 --model random --tokens 64 --out $OUT/profile 2>&1 | grep -v USDT | tail -4
timeout 60 python3 benchmarks/bench_sampling_ops.py --device cuda --repeats 20 --out $OUT/sampling_ops.json 2>&1 | tail -30
