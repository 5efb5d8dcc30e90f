# Lease AY, call 2: join the model; the CUDA overlap tests (not run on a GPU since the worker
# began keying the adaptive mode's specs by the controller's batch bucket), then issue 7's
# sweep on an H200 with the adaptive mode's verify budget (lease AW ran it on an H100: 1.38 /
# 1.37 / 1.28 / 1.26x): 80 MT-bench first turns x 256 tokens, bf16, head D, plain and adaptive
# side by side at batch 1, 4, 16, 64, medians of 5 runs.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/ay2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "== CUDA overlap tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda/test_cuda_graphs.py \
  -k "overlapped" > $O/tests.txt 2>&1; tail -3 $O/tests.txt
timeout 420 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H --num-prompts 80 --max-new-tokens 256 --batch-sizes 1,4,16,64 \
  --modes plain,adaptive --repeats 5 --no-split --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror" | tail -16
rm -f $O/*/*.png
