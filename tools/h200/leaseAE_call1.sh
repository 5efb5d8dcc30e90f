# Lease AE, call 1: stage the model's first half; per-layer times of the row-split gemv
# around the chain's verify (5-8 rows), against the default.
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/
O=$OUT/ae1; mkdir -p $O
echo "== micro"; timeout 200 python3 benchmarks/bench_fused_linear.py --dtype bfloat16 --rows 1,3,4,5,6,7,8 \
  --configs g2x2p,g2x2pr2,g2x2pr3,g4x2pr2,g2x4pr2,g1x1pr2 > $O/micro.txt 2>&1; grep -vE "splits taken" $O/micro.txt | tail -18
