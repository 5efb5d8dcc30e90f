# Lease AA, one call: HEAD's GPU suite (the gemv kernel with prefetch by default for
# 16-bit forwards of <= 4 rows). No model needed.
source tools/h200/env.sh
O=$OUT/aa1; mkdir -p $O
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rf -k "not tensor_parallel and not train_draft" > $O/gpu_full.txt 2>&1
grep -v "CUDAGraph.cpp" $O/gpu_full.txt | grep -E "^(FAILED|ERROR|E  )|passed|failed" | head -20 | tee $O/gpu_tests.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/core/ops/triton/test_fused_linear.py -k "not gemv_equals" 2>&1 | tail -1
