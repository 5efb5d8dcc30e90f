# Lease B, call 3: wait for the head, bring it back, then the bs1 benchmark with it
# (bf16: plain/chain/tree/adaptive; chain with the chain graph off; fp32 lossless check).
source tools/h200/env.sh
for i in $(seq 60); do [ -f /root/train/rc ] && break; sleep 5; done
echo "train rc $(cat /root/train/rc 2>/dev/null)"; tail -c 700 /root/train/train.log
HEAD=/root/train/eagle1-smollm2-135m-instruct
mkdir -p $OUT/head $OUT/bench
cp $HEAD/config.json $HEAD/model.safetensors $OUT/head/ 2>/dev/null
grep -a "tokens in answers\|data:" /root/train/data.log | tail -2 > $OUT/bench/data_summary.txt
timeout 150 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 10 --max-new-tokens 256 --batch-sizes 1 \
  --modes plain,chain,tree,adaptive --dtype bfloat16 --out $OUT/bench/bs1 2>&1 | grep -E "^bench|tokens/s"
EAGLE_HAL_CHAIN_GRAPH=0 timeout 60 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 10 --max-new-tokens 256 --batch-sizes 1 \
  --modes plain,chain --dtype bfloat16 --out $OUT/bench/nochaingraph 2>&1 | grep -E "^bench|tokens/s"
timeout 70 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $HEAD \
  --dataset $MTBENCH --num-prompts 10 --max-new-tokens 128 --batch-sizes 1 --no-split \
  --modes plain,chain,tree --dtype float32 --out $OUT/bench/fp32 2>&1 | grep -E "^bench|tokens/s"
timeout 90 python3 benchmarks/bench_attention.py 2>&1 | tail -40 > $OUT/bench/attention.txt; tail -40 $OUT/bench/attention.txt
rm -f $OUT/bench/*/*.png
