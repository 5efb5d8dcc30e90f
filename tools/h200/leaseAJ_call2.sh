# Lease AJ, call 2: join the model; adaptive vs plain sweep (80 x 128, bs 1/4/16/64) with
# ragged prefill graphs; where a bench run's time goes (prefill calls against decode).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/aj2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== sweep"; timeout 380 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive --no-split \
  --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; rm -f $O/*/*.png
echo "== host"; timeout 180 python3 benchmarks/profile_host.py --device cuda:0 --model $GGUF --draft $H0 --dataset $MTBENCH \
  --num-prompts 40 --max-new-tokens 128 --modes plain,adaptive --batch-sizes 1,16 --no-cprofile > $O/host.txt 2>&1; grep -E "^==|calls|outside" $O/host.txt
