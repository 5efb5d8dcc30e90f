# Lease BF, one call, no model (what 8 device-minutes hold after a session of failed
# starts): the CUDA checks of the twenty-fourth and twenty-fifth sessions' code (rotary
# table, grow and organize kernels, draft-loop graphs without their copies), then the
# conformance suite on cuda:0.
source tools/h200/env.sh
O=$OUT/bf1; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda tests/core/model/test_rotary.py \
  tests/core/ops/triton/test_kernels.py tests/core/spec/test_chain_layout.py > $O/tests.txt 2>&1
echo "pytest rc $?"; tail -3 $O/tests.txt
timeout 150 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $O/cuda.json \
  > $O/conformance.txt 2>&1
echo "conformance rc $?"; grep -E "fail|RESULT|^  [a-z_]+ |passed" $O/conformance.txt | tail -12
