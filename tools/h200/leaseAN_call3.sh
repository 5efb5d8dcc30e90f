# Lease AN, call 3: head D = head C's recipe (cross-entropy alone, 3 unrolled steps, batch 32,
# seed 0) on the broad data, 8.8 minutes under the time budget.
source tools/h200/env.sh
O=$OUT/an3; mkdir -p $O
timeout 585 python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
  --out /root/train/headD --data /root/train/broad.data.safetensors \
  --steps 20000 --batch-size 32 --unroll-steps 3 --seed 0 --validate-every 2500 \
  --regression-weight 0.0 --cross-entropy-weight 1.0 --time-budget-min 8.8 > /root/train/trainD.log 2>&1
echo "rc $?"; tr '\r' '\n' < /root/train/trainD.log > $O/trainD.log; grep -E "^step|valid|trained|rror" $O/trainD.log | tail -8
cp -r /root/train/headD $O/ && ls -la $O/headD
