# Lease G, call 6: head C = head B's recipe (cross-entropy alone, 3 unrolled steps) alone on
# the GPU for 6.3 minutes on the same data, then its MT-bench accept lengths (chain, tree).
source tools/h200/env.sh
O=/root/out/g6; mkdir -p $O
timeout 400 python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
  --out /root/train/headC --data /root/train/smollm2.data.safetensors \
  --steps 12000 --batch-size 32 --unroll-steps 3 --seed 0 --validate-every 2000 \
  --regression-weight 0.0 --cross-entropy-weight 1.0 --time-budget-min 6.3 > /root/train/trainC.log 2>&1
echo "rc $?"; tr '\r' '\n' < /root/train/trainC.log > $O/trainC.log; grep -E "^step|trained|rror" $O/trainC.log | tail -6
cp -r /root/train/headC $O/
timeout 80 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH --draft /root/train/headC \
  --max-new-tokens 256 --dtype bfloat16 --num-prompts 10 --batch-sizes 1 --modes chain,tree --no-split --out $O/accC 2>&1 | grep -E "tokens/s|rror"
rm -f $O/*/*.png
tar czf $OUT/g6.tgz -C /root/out g6
