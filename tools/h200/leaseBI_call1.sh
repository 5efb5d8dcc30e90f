# Lease BI, one call, no model (the ~280 device-seconds left after lease BH): the whole
# conformance suite on cuda:0 at this commit, report beside it as Markdown (for
# docs/conformance/cuda.json and cuda.md).
source tools/h200/env.sh
O=$OUT/bi1; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 200 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $O/cuda.json \
  > $O/conformance.txt 2>&1
echo "conformance rc $?"; tail -15 $O/conformance.txt
