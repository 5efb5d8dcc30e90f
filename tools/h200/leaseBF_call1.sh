# Lease BF, one call, no model (what the device time left after a session of failed starts
# holds): the CUDA checks of the twenty-fourth and twenty-fifth sessions' code (rotary
# table, grow and organize kernels, draft-loop graphs without their copies), then the
# conformance suite's sampling and graphs areas on cuda:0.
source tools/h200/env.sh
O=$OUT/bf1; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/core/ops/triton/test_kernels.py \
  tests/core/spec/test_chain_layout.py tests/core/model/test_rotary.py \
  tests/backends/cuda/test_cuda_graphs.py > $O/tests.txt 2>&1
echo "pytest rc $?"; tail -3 $O/tests.txt
timeout 120 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --areas sampling,graphs \
  --report $O/cuda.json > $O/conformance.txt 2>&1
echo "conformance rc $?"; grep -E "fail|RESULT|^  [a-z_]+ |passed" $O/conformance.txt | tail -12
