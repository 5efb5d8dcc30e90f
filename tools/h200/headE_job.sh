# Head E, the whole job in one process session (started by leaseBA_call2.sh with setsid, so
# it outlives the call and runs on while later calls wait for it): data, training, then
# MT-bench next to plain decoding. Runs from a copy of the checkout (/root/eh), so a later
# call's fresh copy of the working tree cannot change the files under it.
# Issue 8: trained in under 25 GPU-minutes (here 7.5 data + 11 training = 18.5); chain S = 5
# >= 3.0 and tree K = 4, N >= 8 >= 3.5 on MT-bench first turns (head D on the H200: 2.60, 3.85).
cd /root/eh || exit 1
source tools/h200/env.sh
T=/root/train; mkdir -p $T/out
note() { echo "$(date -u +%H:%M:%S) $*" >> $T/status; }
note start
python3 -m eagle_hal train-draft --stage data --device cuda:0 --model "$GGUF" \
  --out $T/headE --data $T/e.data.safetensors \
  --num-prompts 250000 --gen-batch-size 256 --max-new-tokens 256 --max-prompt-tokens 128 \
  --prompt-openers tools/h200/openers_broad_passages.txt --prompt-temperatures 0.7,0.85,1.0 \
  --answer-temperatures 0,0,0.3,0.7 --seed 1 --time-budget-min 7.5 > $T/data.log 2>&1
note "data rc $?"
python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
  --out $T/headE --data $T/e.data.safetensors \
  --steps 40000 --batch-size 32 --unroll-steps 3 --seed 0 --validate-every 3000 \
  --regression-weight 0.0 --cross-entropy-weight 1.0 --time-budget-min 11 > $T/train.log 2>&1
note "train rc $?"
python3 -m eagle_hal bench --device cuda:0 --backend cuda --model "$GGUF" --dataset "$MTBENCH" \
  --dtype bfloat16 --draft $T/headE --max-new-tokens 256 --num-prompts 80 --batch-sizes 1 \
  --modes plain,chain:S5,tree:S5K4N16,tree:S8K4N48 --draft-vocab full --repeats 1 --no-split \
  --out $T/out/bs1E > $T/bench.log 2>&1
note "bench rc $?"
# head D on the same machine and prompts, for a side-by-side figure (lease AO, H200: 2.60, 3.85)
python3 -m eagle_hal bench --device cuda:0 --backend cuda --model "$GGUF" --dataset "$MTBENCH" \
  --dtype bfloat16 --draft core/src/eagle_hal/data/eagle1-smollm2-135m-instruct \
  --max-new-tokens 256 --num-prompts 80 --batch-sizes 1 \
  --modes plain,chain:S5,tree:S8K4N48 --draft-vocab full --repeats 1 --no-split \
  --out $T/out/bs1D > $T/benchD.log 2>&1
note "bench D rc $?"
touch $T/done
