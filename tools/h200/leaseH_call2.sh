# Lease H (next session; not run yet), call 2: stage the model, start train_head6.sh
# detached, run the GPU tests beside the data stage, wait for the data stage.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/h2; mkdir -p $O /root/train
setsid nohup bash tools/h200/train_head6.sh > /root/train/daemon.log 2>&1 < /dev/null &
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -4 | tee $O/gpu_tests.txt
while [ ! -f /root/train/data_rc ] && [ $SECONDS -lt 570 ]; do sleep 5; done
echo "data rc $(cat /root/train/data_rc 2>/dev/null)"
tr '\r' '\n' < /root/train/data.log | grep -v "^$" | tail -3 | tee $O/data_tail.txt
tar czf $OUT/h2.tgz -C /root/out h2
