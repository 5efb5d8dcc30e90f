# Lease G, call 2: stage the model, start train_head5.sh detached (data, then heads A and B),
# run the GPU tests beside the data stage, and wait for the data stage (at most ~9 min).
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/g2; mkdir -p $O /root/train
setsid nohup bash tools/h200/train_head5.sh > /root/train/daemon.log 2>&1 < /dev/null &
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -4 | tee $O/gpu_tests.txt
while [ ! -f /root/train/data_rc ] && [ $SECONDS -lt 560 ]; do sleep 5; done
echo "data rc $(cat /root/train/data_rc 2>/dev/null)"
tr '\r' '\n' < /root/train/data.log | grep -v "^$" | tail -5 | tee $O/data_tail.txt
tar czf $OUT/g2.tgz -C /root/out g2
