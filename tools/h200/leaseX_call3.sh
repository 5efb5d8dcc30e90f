# Lease X, call 3: plain vs adaptive over batch sizes 1-64 on all 80 MT-bench questions.
source tools/h200/env.sh
O=/root/out/x3; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/x3.tgz -C /root/out x3; }
echo "== sweep"; timeout 300 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive \
  --no-split --repeats 3 --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; pack
