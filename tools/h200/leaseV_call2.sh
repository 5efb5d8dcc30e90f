# Lease V, call 2: the matrix-vector projection kernel (LaunchConfig.gemv). Its tests on
# the device, a per-layer sweep of gemv configs against today's default, then batch 1
# end to end with the best gemv config forced and without. Packed after each step.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/v2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/v2.tgz -C /root/out v2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror|Error" | tail -20; }
echo "== tests"; timeout 200 python3 -m pytest -q -x tests/core/ops/triton/test_fused_linear.py -p no:cacheprovider > $O/tests.txt 2>&1; tail -3 $O/tests.txt; pack
echo "== micro"; timeout 150 python3 benchmarks/bench_fused_linear.py --dtype bfloat16 --rows 1,6,16 \
  --configs g1x1,g2x1,g2x2,g4x1,g4x2,g4x4,g8x2,g8x4,g8x8,g16x4,g16x8,g32x8 > $O/micro.txt 2>&1; cat $O/micro.txt | tail -12; pack
BEST=$(python3 - $O/micro.txt <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
head = next(l.split() for l in lines if l.split()[:2] == ["rows", "unfused"])
row = next(l.split() for l in lines if l.split() and l.split()[0] == "1")
times = {n: float(v) for n, v in zip(head, row) if n.startswith("g")}
print(min(times, key=times.get) if times else "g4x4")
PY
)
echo "best gemv: $BEST"
echo "== bs1 default"; T=150 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --no-split --repeats 3 --out $O/bs1_default; pack
echo "== bs1 gemv $BEST"; EAGLE_HAL_FUSED_LINEAR_CONFIG=$BEST T=150 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --no-split --repeats 3 --out $O/bs1_gemv; pack
