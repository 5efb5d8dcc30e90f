# Lease W, call 2: the gemv kernel by default for 16-bit forwards of <= 4 rows, a row
# loop that takes several rows a step (block_m), the bench's warm-up of every timed
# prompt's prefill. Tests, a per-layer sweep at 1-16 rows, batch 1 end to end (the new
# default, then gemv for every row count up to 16), the plain/adaptive sweep.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/w2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/w2.tgz -C /root/out w2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 "$@" 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; }
echo "== tests"; timeout 200 python3 -m pytest -q tests/core/ops/triton/test_fused_linear.py -p no:cacheprovider > $O/tests.txt 2>&1; tail -2 $O/tests.txt; pack
echo "== micro"; timeout 150 python3 benchmarks/bench_fused_linear.py --dtype bfloat16 --rows 1,2,4,6,16 \
  --configs g2x2,g2x2x2,g2x2x4,g2x4x4,g1x2x4,g2x1x4,g4x2x2,g4x4x4,g1x1x8,g1x2x8 > $O/micro.txt 2>&1; grep -vE "splits taken" $O/micro.txt | tail -12; pack
echo "== bs1 default"; T=150 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --no-split --repeats 3 --out $O/bs1_default; pack
echo "== bs1 g2x2x4"; EAGLE_HAL_FUSED_LINEAR_CONFIG=g2x2x4 T=150 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --no-split --repeats 3 --out $O/bs1_g2x2x4; pack
echo "== sweep"; T=280 b --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive --no-split --repeats 3 --out $O/sweep; pack
