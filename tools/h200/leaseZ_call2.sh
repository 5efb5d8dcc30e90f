# Lease Z, call 2: the gemv kernel with the next row's loads in flight (prefetch). Tests,
# a per-layer sweep at 1-16 rows against the tl.dot kernel, then batch 1 end to end: the
# default (gemv g2x2 up to 4 rows) against prefetch up to the measured crossover.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=/root/out/z2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/z2.tgz -C /root/out z2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 "$@" 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; }
echo "== tests"; timeout 120 python3 -m pytest -q -x tests/core/ops/triton/test_fused_linear.py -k gemv -p no:cacheprovider > $O/tests.txt 2>&1; tail -1 $O/tests.txt; pack
echo "== micro"; timeout 150 python3 benchmarks/bench_fused_linear.py --dtype bfloat16 --rows 1,2,4,6,8,16 \
  --configs 16x256x4x3,g2x2,g2x2p,g2x4p,g4x2p,g1x2p,g2x1p,g4x4p > $O/micro.txt 2>&1; grep -vE "splits taken" $O/micro.txt | tail -14; pack
SPLIT=$(python3 - $O/micro.txt <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
head = next(l.split() for l in lines if l.split()[:2] == ["rows", "unfused"])
table = {int(l.split()[0]): dict(zip(head, (float(v.rstrip("x!")) for v in l.split()[:len(head)])))
         for l in lines if l.split() and l.split()[0].isdigit() and len(l.split()) >= len(head)}
best = min((n for n in head if n.endswith("p")), key=lambda n: table[1][n])
rows = max([r for r in table if table[r][best] < table[r]["16x256x4x3"]], default=1)
print(f"{rows}:{best}")
PY
)
echo "gemv split: $SPLIT"
echo "== bs1 default"; T=150 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --no-split --repeats 3 --out $O/bs1_default; pack
echo "== bs1 $SPLIT"; EAGLE_HAL_GEMV=$SPLIT T=150 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --no-split --repeats 3 --out $O/bs1_prefetch; pack
