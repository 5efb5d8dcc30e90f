# Lease Y, call 2 (lease X was taken back before its call 3): the sweep of leaseX_call3.sh on a fresh machine.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=/root/out/y2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/y2.tgz -C /root/out y2; }
echo "== sweep"; timeout 300 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive \
  --no-split --repeats 3 --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; pack
