# Lease AU, call 3: head E = head D's training recipe (cross-entropy alone, 3 unrolled
# steps, batch 32, seed 0) for 9.4 minutes instead of 6.5 (head D's held-out accept was
# still rising slowly at its budget's end); data + training stay under issue 8's 25 minutes.
source tools/h200/env.sh
O=$OUT/au3; mkdir -p $O
timeout 590 python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
  --out /root/train/headE --data /root/train/e.data.safetensors \
  --steps 30000 --batch-size 32 --unroll-steps 3 --seed 0 --validate-every 3000 \
  --regression-weight 0.0 --cross-entropy-weight 1.0 --time-budget-min 9.4 > /root/train/trainE.log 2>&1
echo "rc $?"; tr '\r' '\n' < /root/train/trainE.log > $O/trainE.log; grep -E "^step|valid|trained|rror" $O/trainE.log | tail -8
cp -r /root/train/headE $O/ && ls -la $O/headE
