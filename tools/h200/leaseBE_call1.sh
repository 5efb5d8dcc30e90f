# Lease BE, call 1 (carrying .stage/a and the egg-infos): stage the model's first half, then
# the CUDA checks of the twenty-fourth session's code (rotary table, grow kernel, host paths).
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/ && echo staged
O=$OUT/be1; mkdir -p $O
python3 -m pytest -q -p no:cacheprovider tests/backends/cuda tests/core/model/test_rotary.py \
  tests/core/ops/triton/test_kernels.py -x > $O/tests.txt 2>&1
tail -3 $O/tests.txt
