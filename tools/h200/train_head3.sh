# Session 4's head, run detached (setsid) so that other calls can use the lease meanwhile:
# data (4 min; user prompts steered by the built-in openers, prompt temperatures 0.7-1.0,
# prompts up to 128 tokens), then training with the unrolled loss (3 steps) for 8 min.
# Logs and the head land under /root/train; /root/train/rc holds the exit status.
mkdir -p /root/train
cd "$(dirname "$0")/../.." && source tools/h200/env.sh
python3 -c "import eagle_hal; print('eagle_hal from', eagle_hal.__file__)"
{
  python3 -m eagle_hal train-draft --stage data --device cuda:0 --model "$GGUF" \
    --out /root/train/eagle1-smollm2-135m-instruct --data /root/train/smollm2.data.safetensors \
    --num-prompts 60000 --gen-batch-size 256 --max-new-tokens 256 --max-prompt-tokens 128 \
    --prompt-openers builtin --prompt-temperatures 0.7,0.85,1.0 --answer-temperatures 0,0,0.3,0.7 \
    --seed 0 --time-budget-min 4 > /root/train/data.log 2>&1 &&
  python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
    --out /root/train/eagle1-smollm2-135m-instruct --data /root/train/smollm2.data.safetensors \
    --steps 12000 --batch-size 32 --unroll-steps 3 --seed 0 --time-budget-min 8 --validate-every 1000 \
    > /root/train/train.log 2>&1
  echo $? > /root/train/rc
}
