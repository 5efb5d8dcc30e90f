# Lease X, call 2: HEAD (gemv projections by default for <= 4 rows, the controller's
# outlier check, the bench's prefill warm-up): the GPU suite, the conformance report,
# batch 1 in every mode, the profile of plain decoding. Packed after each step.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/x2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/x2.tgz -C /root/out x2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 "$@" 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; }
echo "== gpu tests"; timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rf -k "not tensor_parallel and not train_draft" > $O/gpu_full.txt 2>&1
grep -v "CUDAGraph.cpp" $O/gpu_full.txt | grep -E "^(FAILED|ERROR|E  )|passed|failed" | head -20 | tee $O/gpu_tests.txt; pack
echo "== conformance"; timeout 170 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $O/cuda.json > $O/conformance.txt 2>&1; echo "conformance rc $?"
grep -E "total" $O/conformance.txt | tail -2; pack
echo "== bs1"; T=200 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree,adaptive --no-split --repeats 3 --out $O/bs1; pack
echo "== profile"; timeout 100 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --draft $H0 --modes plain,chain,tree --tokens 64 --out $O/profile 2>&1 | grep -v USDT | cut -c1-300 | tail -4; pack
