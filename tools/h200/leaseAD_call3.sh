# Lease AD, call 3: adaptive vs plain sweep (80 x 128, bs 1/4/16/64) with the call-1 gemv
# choice and the seeded buckets' early S = 0 probe; the GPU suite.
source tools/h200/env.sh
O=/root/out/ad3; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/ad3.tgz -C /root/out ad3; }
GEMV=$(head -1 /root/out/gemv 2>/dev/null); [ -n "$GEMV" ] && export EAGLE_HAL_GEMV=$GEMV; echo "gemv: '$GEMV'"
echo "== sweep"; timeout 330 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive --no-split \
  --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; pack
echo "== gpu suite"; timeout 220 python3 -m pytest -q -m gpu -p no:cacheprovider tests > $O/gpu.txt 2>&1; tail -3 $O/gpu.txt; pack
