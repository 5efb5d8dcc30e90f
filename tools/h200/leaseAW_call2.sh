# Lease AW, call 2: join the model; after lease AV (adaptive 0.94x / 1.00x plain at batch 64
# while a fixed chain of S = 3 ran 1.14x: the adaptive mode's K = 4, N = 16 trees verify 1,024
# tokens a batch there), the adaptive mode narrows its trees past 256 verify tokens a batch
# (SpecConfig.adaptive_verify_budget; N = 4 at batch 64, 8 at 32). The CUDA overlap tests,
# then issue 7's sweep in one command: 80 MT-bench first turns x 256 tokens, bf16, head D,
# plain and adaptive side by side at batch 1, 4, 16, 64, medians of 5 runs.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/aw2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "== CUDA overlap tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda/test_cuda_graphs.py \
  -k "overlapped" > $O/tests.txt 2>&1; tail -3 $O/tests.txt
timeout 420 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H --num-prompts 80 --max-new-tokens 256 --batch-sizes 1,4,16,64 \
  --modes plain,adaptive --repeats 5 --no-split --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror" | tail -16
rm -f $O/*/*.png
