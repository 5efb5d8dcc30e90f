# Lease D (session 5), call 2: stage the model, then the fused small-batch projections on
# the H200: their kernel tests, the per-layer micro-benchmark, and the bs1 MT-bench A/B
# (EAGLE_HAL_FUSED_LINEAR=0 / 1, shipped head) with the GPU to ourselves.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/d2; mkdir -p $O
nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv | tee $O/gpu.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/core/ops/triton/test_fused_linear.py 2>&1 | tail -3 | tee $O/fused_tests.txt
timeout 150 python3 benchmarks/bench_fused_linear.py 2>&1 | tee $O/fused_layer.txt
b() { timeout ${T:-120} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --num-prompts 10 --max-new-tokens 256 --batch-sizes 1 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|Error|error" | tail -8; }
for f in 0 1; do echo "== EAGLE_HAL_FUSED_LINEAR=$f"; EAGLE_HAL_FUSED_LINEAR=$f b --modes plain,chain,tree --out $O/fused$f; done
rm -f $O/*/*.png
tar czf $OUT/d2.tgz -C /root/out d2
