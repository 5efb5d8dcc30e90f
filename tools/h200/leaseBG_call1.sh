# Lease BG, one short call (the last ~250 device-seconds of a session): the new tree kernels
# (grow, organize), the chain layout and the rotary table compiled on CUDA, against the
# reference.
source tools/h200/env.sh
O=$OUT/bg1; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/core/ops/triton/test_kernels.py \
  tests/core/spec/test_chain_layout.py tests/core/model/test_rotary.py -k "organize or grow or chain or rotary" \
  > $O/tests.txt 2>&1
echo "pytest rc $?"; tail -3 $O/tests.txt
