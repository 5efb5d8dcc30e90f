# Lease J, call 2: stage the model; the fused-projection sweep (split-K included, each
# config checked for closeness, repeat-launch determinism and row invariance); bs1
# plain/tree with head C and the default launch (plain now keeps one iteration in
# flight), 3 timed runs each.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/j2; mkdir -p $O
echo "== fused sweep"; timeout 300 python3 benchmarks/bench_fused_linear.py --dtype bfloat16 --rows 1,16 2>&1 | grep -v "^  .*splits taken" | tee $O/fused_sweep.txt | tail -40
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
echo "== bs1 (C, default launch)"; T=200 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,tree --out $O/bs1
rm -f $O/*/*.png
tar czf $OUT/j2.tgz -C /root/out j2
