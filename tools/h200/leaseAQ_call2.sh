# Lease AQ, call 2 (not run yet): join the model; head D's data stage (the broad openers,
# 200,000 prompts, 8 minutes; the same command as lease AN's call 2).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/aq2; mkdir -p $O /root/train
timeout 560 python3 -m eagle_hal train-draft --stage data --device cuda:0 --model "$GGUF" \
  --out /root/train/headE3 --data /root/train/broad.data.safetensors \
  --num-prompts 200000 --gen-batch-size 256 --max-new-tokens 256 --max-prompt-tokens 128 \
  --prompt-openers broad --prompt-temperatures 0.7,0.85,1.0 --answer-temperatures 0,0,0.3,0.7 \
  --seed 0 --time-budget-min 8 > /root/train/data.log 2>&1
echo "rc $?"; tr '\r' '\n' < /root/train/data.log | grep -v "^$" | tail -15 > $O/data_tail.txt; tail -6 $O/data_tail.txt
nvidia-smi --query-gpu=name,memory.total --format=csv; ls -la /root/train
