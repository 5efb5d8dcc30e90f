# Lease U, call 2: the adaptive controller charges a change of depth (the old chain's
# read-back, the new chain's first launch) to the probe, a chain restarted after the
# batch changed to the depth. Plain vs adaptive over batch sizes 1-64 on all 80 MT-bench
# questions, then batch 1 plain/tree/adaptive. Packed after each step.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/u2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/u2.tgz -C /root/out u2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror|Error" | tail -20; }
echo "== sweep"; T=300 b --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive --no-split --repeats 3 --out $O/sweep; pack
echo "== bs1 x3"; T=120 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,tree,adaptive --no-split --repeats 3 --out $O/bs1; pack
