# Lease AY, call 2 (file name: the sweep planned as call 2 went to lease AZ): join the model; head E's data: head D's recipe with the passage openers (broad plus 14 that
# have the target write a text to ask about: the head lags the target most in extraction,
# docs/training.md), the same temperatures, seed 1, time budget 7.5 minutes (head D: 8 minutes,
# 21.0 M tokens). Issue 8's chain target (S = 5 >= 3.0; head D 2.60 on the H200).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/ay3; mkdir -p $O /root/train
timeout 560 python3 -m eagle_hal train-draft --stage data --device cuda:0 --model "$GGUF" \
  --out /root/train/headE --data /root/train/e.data.safetensors \
  --num-prompts 250000 --gen-batch-size 256 --max-new-tokens 256 --max-prompt-tokens 128 \
  --prompt-openers tools/h200/openers_broad_passages.txt --prompt-temperatures 0.7,0.85,1.0 --answer-temperatures 0,0,0.3,0.7 \
  --seed 1 --time-budget-min 7.5 > /root/train/data.log 2>&1
echo "rc $?"; tr '\r' '\n' < /root/train/data.log | grep -v "^$" | tail -15 > $O/data_tail.txt; tail -6 $O/data_tail.txt
ls -la /root/train
