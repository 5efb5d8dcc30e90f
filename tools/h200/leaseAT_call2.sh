# Lease AT, call 2: join the model; after lease AS, a shrinking batch carries its
# speculative chain (commit "speculative overlap: a batch that shrinks ..."): the CUDA
# overlap tests (float32 tokens equal, requests finishing), then batch 64 over 80 x 256
# (lease AS: 0.97x by the median of 9), then batch 16 and 4 (the device time left allows no more).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/at2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== CUDA overlap tests"; timeout 110 python3 -m pytest -q -x -p no:cacheprovider tests/backends/cuda/test_cuda_graphs.py \
  -k "overlapped" > $O/tests.txt 2>&1; tail -2 $O/tests.txt
B="python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH --dtype bfloat16 --draft $H --num-prompts 80 --no-split --modes plain,adaptive"
echo "== bs64 x 9"; timeout 100 $B --max-new-tokens 256 --batch-sizes 64 --repeats 9 --out $O/bs64 2>&1 | grep -E "^bench: mode|tokens/s \(|rror" | tail -6
echo "== bs16, bs4 x 3"; timeout 100 $B --max-new-tokens 256 --batch-sizes 16,4 --repeats 3 --out $O/bs16 2>&1 | grep -E "^bench: mode|tokens/s \(|rror" | tail -8
rm -f $O/*/*.png
