# Lease BE, call 1 (carrying .stage/a and the egg-infos): stage the model's first half, then
# the CUDA checks of the twenty-fourth session's code (rotary table, grow kernel, host paths)
# and the conformance suite on cuda:0.
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/ && echo staged
O=$OUT/be1; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda tests/core/model/test_rotary.py \
  tests/core/ops/triton/test_kernels.py > $O/tests.txt 2>&1
echo "pytest rc $?"; tail -3 $O/tests.txt
timeout 200 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $O/cuda.json \
  > $O/conformance.txt 2>&1
echo "conformance rc $?"; grep -E "fail|RESULT|^  [a-z_]+ |passed" $O/conformance.txt | tail -12
