# Lease AQ, call 3 (not run yet): head E3 = an EAGLE-3 head (--variant eagle3: cross-entropy
# alone, 3 unrolled steps, batch 32, seed 0) on the same data under the same 8.8-minute
# budget as head D, so that the two variants compare on equal data and time.
source tools/h200/env.sh
O=$OUT/aq3; mkdir -p $O
timeout 585 python3 -m eagle_hal train-draft --stage train --variant eagle3 --device cuda:0 \
  --model "$GGUF" --out /root/train/headE3 --data /root/train/broad.data.safetensors \
  --steps 20000 --batch-size 32 --unroll-steps 3 --seed 0 --validate-every 2500 \
  --time-budget-min 8.8 > /root/train/trainE3.log 2>&1
echo "rc $?"; tr '\r' '\n' < /root/train/trainE3.log > $O/trainE3.log; grep -E "^step|valid|trained|rror" $O/trainE3.log | tail -8
cp /root/train/headE3/config.json $O/ && ls -la /root/train/headE3
