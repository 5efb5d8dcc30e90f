# Lease C (session 4), call 2: stage the model, start data + training detached, then
# (sharing the GPU: correctness and accept lengths only, no throughput) the chain-graph
# check with real CUDA graphs, the CUDA conformance suite, the GPU tests, and an accept A/B
# of float32 vs bf16 dot operands in the split-K attention. Then hold the lease.
START=$(date +%s)
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
mkdir -p /root/train /root/out/c2
setsid nohup bash tools/h200/train_head3.sh > /root/train/daemon.log 2>&1 < /dev/null &
sleep 1
timeout 150 python3 tools/h200/chain_dbg.py --quick 2>&1 | grep -E "PASS|FAIL|seconds" | tee /root/out/c2/chain_dbg.txt
timeout 200 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report /root/out/c2/cuda.json > /root/out/c2/conformance.txt 2>&1; echo "conformance rc $?"
grep -E "fail|FAIL|RESULT|passed" /root/out/c2/conformance.txt | tail -8
timeout 220 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -12 | tee /root/out/c2/gpu_tests.txt
SHIPPED=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
for dot in 0 1; do
  EAGLE_HAL_ATTN_FP32_DOT=$dot timeout 100 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF \
    --draft $SHIPPED --dataset $MTBENCH --num-prompts 10 --max-new-tokens 256 --batch-sizes 1 \
    --modes chain,tree --dtype bfloat16 --out /root/out/c2/fp32dot$dot 2>&1 | grep -E "^bench: mode|tokens/s" | tail -4
done
rm -f /root/out/c2/*/*.png
tar czf $OUT/c2.tgz -C /root/out c2
while [ $(( $(date +%s) - START )) -lt ${HOLD:-585} ] && [ ! -f /root/train/rc ]; do sleep 10; done
tr '\r' '\n' < /root/train/data.log | tail -3; echo; tr '\r' '\n' < /root/train/train.log 2>/dev/null | tail -4
