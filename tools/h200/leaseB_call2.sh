# Lease B, call 2: stage the model, start data + unrolled training detached, then (sharing
# the GPU, correctness only) the chain-graph diagnosis, the GPU tests and the CUDA
# conformance suite; then wait, keeping the lease warm, and show the training's progress.
START=$(date +%s)
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
mkdir -p /root/train $OUT/conformance
PRE=1 UNROLL=3 setsid nohup bash tools/h200/train_head2.sh > /root/train/daemon.log 2>&1 < /dev/null &
sleep 1
timeout 120 python3 tools/h200/chain_dbg.py 2>&1 | grep -E "PASS|FAIL|seconds" | tee $OUT/chain_dbg.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -8 | tee $OUT/gpu_tests.txt
timeout 150 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $OUT/conformance/cuda.json 2>&1 | grep -E "fail|RESULT|^  [a-z_]+ " | tail -12
while [ $(( $(date +%s) - START )) -lt ${HOLD:-590} ] && [ ! -f /root/train/rc ]; do sleep 10; done
tail -c 400 /root/train/data.log; echo; tail -c 600 /root/train/train.log 2>/dev/null
