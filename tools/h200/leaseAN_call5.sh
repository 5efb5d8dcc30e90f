# Lease AN, call 5: adaptive vs plain sweep with head D (80 x 128, bs 1/4/16/64).
source tools/h200/env.sh
O=$OUT/an5; mkdir -p $O
echo "== sweep"; timeout 330 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft /root/train/headD --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive --no-split \
  --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; rm -f $O/*/*.png
