# Lease AX, call 2: join the model; the CUDA overlap tests after the fix of lease AW's two
# failures (the worker read bucket_of, which the test double ScriptedController lacks), then
# batch 64 with the verify budget next to plain decoding (80 MT-bench x 256, bf16, medians of 5).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/ax2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== CUDA overlap tests"; timeout 120 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda/test_cuda_graphs.py \
  -k "overlapped" > $O/tests.txt 2>&1; tail -3 $O/tests.txt
timeout 150 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H --num-prompts 80 --max-new-tokens 256 --batch-sizes 64 \
  --modes plain,adaptive --repeats 5 --no-split --out $O/bs64 2>&1 | grep -E "^bench: mode|tokens/s \(|rror" | tail -6
rm -f $O/*/*.png
