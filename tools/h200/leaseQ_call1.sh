# Lease Q, one call: the GPU suite after no_collection (lease P: two captures invalidated
# mid-suite) and the conformance's total_replays. No model needed.
source tools/h200/env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
O=$OUT/q1; mkdir -p $O
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rf -k "not tensor_parallel and not train_draft" > $O/gpu_full.txt 2>&1
grep -v "CUDAGraph.cpp" $O/gpu_full.txt | grep -E "^(FAILED|ERROR|E  )|passed|failed|Error|Warning: CUDA" | head -30 | tee $O/gpu_tests.txt
grep -c "CUDAGraph.cpp" $O/gpu_full.txt
