# Lease I, call 2: stage the model, then with the shipped head C: a profiler view of
# plain/chain/tree (device timeline, Chrome traces), and bs1 plain/chain/tree/adaptive,
# 3 timed runs each (median).
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/i2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== profile"; timeout 200 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --draft $H0 --modes plain,chain,tree --tokens 64 --trace --out $O/profile 2>&1 | grep -v USDT | cut -c1-400 | tail -4
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
echo "== bs1 (C)"; T=200 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree,adaptive --out $O/bs1
rm -f $O/*/*.png
tar czf $OUT/i2.tgz -C /root/out i2
