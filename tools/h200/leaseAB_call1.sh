# Lease AB, call 1: stage the model's first half; on-device tests of the new kernels
# (softmax top-k, the gemv kernel's dot mode); per-layer sweep with dot configs; top-k micro.
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/
O=/root/out/ab1; mkdir -p $O
pack() { tar czf $OUT/ab1.tgz -C /root/out ab1; }
echo "== tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/core/ops/triton/test_topk_kernels.py \
  tests/core/ops/triton/test_fused_linear.py -k "dot or gpu or topk or softmax" > $O/tests.txt 2>&1; tail -3 $O/tests.txt; pack
echo "== micro"; timeout 200 python3 benchmarks/bench_fused_linear.py --dtype bfloat16 --rows 1,4,6,8,16 \
  --configs 16x256x4x3,g2x2p,g16x8x16d,g16x4x16d,g32x8x16d,g16x16x16d > $O/micro.txt 2>&1; grep -vE "splits taken" $O/micro.txt | tail -16; pack
echo "== topk"; timeout 90 python3 benchmarks/bench_softmax_topk.py --rows 1,4,16,64 --k 1,4,8 > $O/topk.txt 2>&1; tail -14 $O/topk.txt; pack
