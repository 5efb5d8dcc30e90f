# Lease AV, call 2: join the model; issue 7's "adaptive never slower than plain across batch
# sizes 1-64" in ONE sweep command (lease AT on an H100 took three calls): 80 MT-bench first
# turns x 256 tokens, bf16, head D, plain and adaptive side by side, medians of 5 runs.
# First the CUDA overlap tests: a request joining now extends the chain in flight
# (spec/overlap_rows.py); float32 tokens equal with and without overlap.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/av2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "== CUDA overlap tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda/test_cuda_graphs.py \
  -k "overlapped" > $O/tests.txt 2>&1; tail -3 $O/tests.txt
timeout 420 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H --num-prompts 80 --max-new-tokens 256 --batch-sizes 1,4,16,64 \
  --modes plain,adaptive --repeats 5 --no-split --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror" | tail -12
rm -f $O/*/*.png
