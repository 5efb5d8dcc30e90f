# Lease G (sixth session), detached: self-distilled data for 5 min, then two heads trained
# side by side on it, 8 min each under a time budget (both share the GPU):
#   A: EAGLE-1's loss with a 10x heavier cross-entropy (regression 1.0, cross-entropy 1.0);
#   B: the cross-entropy alone (regression 0.0, cross-entropy 1.0), as EAGLE-3 trains;
# both unrolled over 3 draft steps. About 14 GPU-minutes for both.
#   setsid nohup bash tools/h200/train_head5.sh > /root/train/daemon.log 2>&1 < /dev/null &
mkdir -p /root/train
cd "$(dirname "$0")/../.." && source tools/h200/env.sh
python3 -m eagle_hal train-draft --stage data --device cuda:0 --model "$GGUF" \
  --out /root/train/headA --data /root/train/smollm2.data.safetensors \
  --num-prompts 90000 --gen-batch-size 256 --max-new-tokens 256 --max-prompt-tokens 128 \
  --prompt-openers builtin --prompt-temperatures 0.7,0.85,1.0 --answer-temperatures 0,0,0.3,0.7 \
  --seed 0 --time-budget-min 5 > /root/train/data.log 2>&1
echo $? > /root/train/data_rc
train() {  # NAME REGRESSION_WEIGHT
  python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
    --out /root/train/head$1 --data /root/train/smollm2.data.safetensors \
    --steps 12000 --batch-size 32 --unroll-steps 3 --seed 0 --validate-every 1500 \
    --regression-weight $2 --cross-entropy-weight 1.0 --time-budget-min 8 \
    > /root/train/train$1.log 2>&1
  echo $? > /root/train/rc$1
}
train A 1.0 &
train B 0.0 &
wait
