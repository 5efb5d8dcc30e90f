# Lease AY, call 4: head E = head D's training recipe (cross-entropy alone, 3 unrolled steps,
# batch 32, seed 0), time budget 7 minutes (head D: 8.8); then head E on all 80 MT-bench first
# turns x 256 tokens, batch 1, bf16, next to plain decoding in one run (issue 8: chain S = 5
# >= 3.0, tree K = 4, N >= 8 >= 3.5; head D on the H200, lease AO: 2.60 and 3.85 at S = 8, N = 48).
# Data + training stay under issue 8's 25 GPU-minutes.
source tools/h200/env.sh
O=$OUT/ay4; mkdir -p $O
timeout 450 python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
  --out /root/train/headE --data /root/train/e.data.safetensors \
  --steps 30000 --batch-size 32 --unroll-steps 3 --seed 0 --validate-every 2500 \
  --regression-weight 0.0 --cross-entropy-weight 1.0 --time-budget-min 7 > /root/train/trainE.log 2>&1
echo "rc $?"; tr '\r' '\n' < /root/train/trainE.log > $O/trainE.log; grep -E "^step|valid|trained|rror" $O/trainE.log | tail -8
cp -r /root/train/headE $O/ && ls -la $O/headE
timeout 110 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft /root/train/headE --max-new-tokens 256 --num-prompts 80 --batch-sizes 1 \
  --modes plain,chain:S5,tree:S8K4N48 --draft-vocab full --repeats 1 --no-split \
  --out $O/bs1E 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -12
rm -f $O/*/*.png
