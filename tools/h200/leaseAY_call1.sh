# Lease AY (twenty-first session), call 1: stage the model's first half; the CUDA overlap
# tests (not run on a GPU since the worker began keying the adaptive mode's specs by the
# controller's batch bucket; they need no model).
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/ && echo staged
O=$OUT/ay1; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "== CUDA overlap tests"; timeout 200 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda/test_cuda_graphs.py \
  -k "overlapped" > $O/tests.txt 2>&1; tail -3 $O/tests.txt
