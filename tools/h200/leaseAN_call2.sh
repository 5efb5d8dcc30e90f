# Lease AN, call 2: join the model; self-distilled data with the broad opener set
# (--prompt-openers broad), 8 minutes, otherwise head C's data settings.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/an2; mkdir -p $O /root/train
timeout 560 python3 -m eagle_hal train-draft --stage data --device cuda:0 --model "$GGUF" \
  --out /root/train/headD --data /root/train/broad.data.safetensors \
  --num-prompts 200000 --gen-batch-size 256 --max-new-tokens 256 --max-prompt-tokens 128 \
  --prompt-openers broad --prompt-temperatures 0.7,0.85,1.0 --answer-temperatures 0,0,0.3,0.7 \
  --seed 0 --time-budget-min 8 > /root/train/data.log 2>&1
echo "rc $?"; tr '\r' '\n' < /root/train/data.log | grep -v "^$" | tail -15 > $O/data_tail.txt; tail -6 $O/data_tail.txt
ls -la /root/train
