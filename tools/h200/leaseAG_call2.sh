# Lease AG, call 2: join the model; one prefill with the prefill graphs off and on (one
# process); adaptive vs plain sweep (80 x 128, bs 1/4/16/64) with them on.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/ag2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== prefill"; timeout 150 python3 benchmarks/profile_prefill.py --device cuda:0 --model $GGUF --draft $H0 --dataset $MTBENCH \
  --num-prompts 20 --profiled 5 --rows 30 > $O/prefill.txt 2>&1; grep -E "^==" $O/prefill.txt
echo "== sweep"; timeout 330 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive --no-split \
  --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; rm -f $O/*/*.png
