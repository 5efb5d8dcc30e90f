# A longer run of the shipped head's recipe for a later lease (not run yet): data for 6 min
# (about 8.9 M tokens at ~24.7k tokens/s), then 10,000 unrolled steps with no time budget
# (~54 ms a step on the H200: about 9 min, validations included) -- about 16 GPU-minutes,
# inside issue 8's 25. The 5,000-step head's held-out accept length still rose at its end
# (2.14 -> 2.22 from step 2,500 to 5,000). Run detached like train_head3.sh:
#   setsid nohup bash tools/h200/train_head4.sh > /root/train/daemon.log 2>&1 < /dev/null &
mkdir -p /root/train
cd "$(dirname "$0")/../.." && source tools/h200/env.sh
{
  python3 -m eagle_hal train-draft --stage data --device cuda:0 --model "$GGUF" \
    --out /root/train/eagle1-smollm2-135m-instruct --data /root/train/smollm2.data.safetensors \
    --num-prompts 90000 --gen-batch-size 256 --max-new-tokens 256 --max-prompt-tokens 128 \
    --prompt-openers builtin --prompt-temperatures 0.7,0.85,1.0 --answer-temperatures 0,0,0.3,0.7 \
    --seed 0 --time-budget-min 6 > /root/train/data.log 2>&1 &&
  python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
    --out /root/train/eagle1-smollm2-135m-instruct --data /root/train/smollm2.data.safetensors \
    --steps 10000 --batch-size 32 --unroll-steps 3 --seed 0 --validate-every 2500 \
    > /root/train/train.log 2>&1
  echo $? > /root/train/rc
}
