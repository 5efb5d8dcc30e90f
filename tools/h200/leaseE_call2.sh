# Lease E (session 5), call 2: stage the model; GPU tests of the fused projections and of
# the CUDA graphs (the tree loop as one graph included); the per-layer micro-benchmark;
# then bs1 MT-bench A/B runs with the GPU to ourselves: default (fused projections, tree
# graph), EAGLE_HAL_FUSED_LINEAR=0, EAGLE_HAL_TREE_GRAPH=0.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/e2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/core/ops/triton/test_fused_linear.py tests/backends/cuda -rs 2>&1 | tail -4 | tee $O/gpu_tests.txt
timeout 90 python3 benchmarks/bench_fused_linear.py --rows 1,6,16 2>&1 | tee $O/fused_layer.txt
b() { timeout 110 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $H --dataset $MTBENCH \
  --num-prompts 10 --max-new-tokens 256 --batch-sizes 1 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -8; }
echo "== default"; b --modes plain,chain,tree --out $O/default
echo "== EAGLE_HAL_FUSED_LINEAR=0"; EAGLE_HAL_FUSED_LINEAR=0 b --modes plain,chain,tree --out $O/unfused
echo "== EAGLE_HAL_TREE_GRAPH=0"; EAGLE_HAL_TREE_GRAPH=0 b --modes plain,tree --out $O/tree-steps
rm -f $O/*/*.png
tar czf $OUT/e2.tgz -C /root/out e2
