# Lease H (next session; not run yet), detached: data for 5.5 min, then head D -- the shipped
# head C's recipe (cross-entropy alone, 3 unrolled steps) -- alone on the GPU for 13 min
# (about 14,000 steps at ~54 ms; C had 5,690 and its held-out accept length still rose,
# 2.37 -> 2.42 over its last 1,690 steps). About 19 GPU-minutes, inside issue 8's 25.
#   setsid nohup bash tools/h200/train_head6.sh > /root/train/daemon.log 2>&1 < /dev/null &
mkdir -p /root/train
cd "$(dirname "$0")/../.." && source tools/h200/env.sh
python3 -m eagle_hal train-draft --stage data --device cuda:0 --model "$GGUF" \
  --out /root/train/headD --data /root/train/smollm2.data.safetensors \
  --num-prompts 120000 --gen-batch-size 256 --max-new-tokens 256 --max-prompt-tokens 128 \
  --prompt-openers builtin --prompt-temperatures 0.7,0.85,1.0 --answer-temperatures 0,0,0.3,0.7 \
  --seed 0 --time-budget-min 5.5 > /root/train/data.log 2>&1
echo $? > /root/train/data_rc
python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
  --out /root/train/headD --data /root/train/smollm2.data.safetensors \
  --steps 20000 --batch-size 32 --unroll-steps 3 --seed 0 --validate-every 3000 \
  --regression-weight 0.0 --cross-entropy-weight 1.0 --time-budget-min 13 \
  > /root/train/trainD.log 2>&1
echo $? > /root/train/rcD
