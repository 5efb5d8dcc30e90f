# Lease C, call 3: wait for the head, then (GPU to ourselves) the bs1 benchmark, new head
# vs shipped head, chain loop as one graph vs step by step.
source tools/h200/env.sh
for i in $(seq 84); do [ -f /root/train/rc ] && break; sleep 5; done
echo "train rc $(cat /root/train/rc 2>/dev/null)"; tr '\r' '\n' < /root/train/train.log | grep -v "it/s\]$" | tail -12
NEW=/root/train/eagle1-smollm2-135m-instruct; SHIPPED=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
mkdir -p /root/out/c3/head
cp $NEW/config.json $NEW/model.safetensors /root/out/c3/head/ 2>/dev/null
tr '\r' '\n' < /root/train/data.log | grep -v "answers/s" | tail -5 > /root/out/c3/data_log_tail.txt
b() { timeout ${T:-110} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --num-prompts 10 --max-new-tokens 256 --batch-sizes 1 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s" | tail -6; }
[ -f $NEW/model.safetensors ] && EAGLE_HAL_CHAIN_GRAPH=1 b --draft $NEW --modes plain,chain,tree --out /root/out/c3/new-graph
EAGLE_HAL_CHAIN_GRAPH=1 b --draft $SHIPPED --modes plain,chain,tree --out /root/out/c3/old-graph
EAGLE_HAL_CHAIN_GRAPH=0 b --draft $SHIPPED --modes plain,chain --out /root/out/c3/old-steps
rm -f /root/out/c3/*/*.png
tar czf $OUT/c3.tgz -C /root/out c3
