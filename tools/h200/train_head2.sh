# Session 3's head: data (5 min, graphs up to 256 requests, grouped admission), then
# training with the unrolled (training-time-test) loss, run detached (setsid) so other
# calls can use the lease meanwhile. Logs and the head land under /root/train.
mkdir -p /root/train
cd "$(dirname "$0")/../.." && source tools/h200/env.sh
# PRE=1: run from the snapshot carried in .stage/pre (the code before a change under test)
if [ "${PRE:-0}" = 1 ]; then export PYTHONPATH=/tmp/site:$PWD/.stage/pre/core:$PWD/.stage/pre/cuda; fi
python3 -c "import eagle_hal; print('eagle_hal from', eagle_hal.__file__)"
UNROLL=${UNROLL:-3}
{
  python3 -m eagle_hal train-draft --stage data --device cuda:0 --model "$GGUF" \
    --out /root/train/eagle1-smollm2-135m-instruct --data /root/train/smollm2.data.safetensors \
    --num-prompts 60000 --gen-batch-size 256 --max-new-tokens 256 --seed 0 --time-budget-min 4 \
    > /root/train/data.log 2>&1 &&
  python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
    --out /root/train/eagle1-smollm2-135m-instruct --data /root/train/smollm2.data.safetensors \
    --steps 12000 --batch-size 32 --unroll-steps "$UNROLL" --seed 0 --time-budget-min 4 --validate-every 1000 \
    > /root/train/train.log 2>&1
  echo $? > /root/train/rc
}
