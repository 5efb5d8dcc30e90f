# Lease AL, call 2: join the model; 16 prompts a prefill, graphs off and on; adaptive vs
# plain sweep (80 x 128, bs 1/4/16/64).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/al2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== prefill group 16"; timeout 100 python3 benchmarks/profile_prefill.py --device cuda:0 --model $GGUF --draft $H0 --dataset $MTBENCH \
  --num-prompts 64 --profiled 2 --rows 20 --group 16 > $O/prefill_g16.txt 2>&1; grep -E "^==" $O/prefill_g16.txt
echo "== sweep"; timeout 300 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive --no-split \
  --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; rm -f $O/*/*.png
