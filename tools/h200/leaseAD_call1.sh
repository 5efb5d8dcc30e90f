# Lease AD, call 1: stage the model's first half; on-device tests of the gemv kernel with
# rows dealt over the grid (rows_per_program); per-layer sweep of row-parallel configs; the
# choice of EAGLE_HAL_GEMV for calls 2-3 written to /root/out/gemv.
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/
O=/root/out/ad1; mkdir -p $O
pack() { tar czf $OUT/ad1.tgz -C /root/out ad1; }
echo "== tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/core/ops/triton/test_fused_linear.py \
  -k "dealt or rows_per_program or gemv_equals or gemv_row_alone or smollm2" > $O/tests.txt 2>&1; tail -3 $O/tests.txt; pack
echo "== micro"; timeout 330 python3 benchmarks/bench_fused_linear.py --dtype bfloat16 --rows 1,2,4,6,8,16 \
  --configs 16x256x4x3,g2x2p,g2x2pr1,g4x2pr1,g8x2pr1,g4x4pr1,g8x4pr1,g2x2pr2,g4x2pr2,g2x2pr4,g4x2pr4,g2x2r1 > $O/micro.txt 2>&1
grep -vE "splits taken" $O/micro.txt | tail -24; pack
python3 tools/h200/pick_gemv.py $O/micro.txt | tee /root/out/gemv $O/gemv_choice.txt; pack
