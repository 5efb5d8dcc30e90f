# Lease A, call 2: stage the model, start the head's data + training detached, then the GPU
# tests of the current checkout (light; they share the GPU with data generation).
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
mkdir -p /root/train $OUT
setsid nohup bash tools/h200/train_head2.sh > /root/train/daemon.log 2>&1 < /dev/null &
sleep 2
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -25 | tee $OUT/gpu_tests.txt
tail -c 1500 /root/train/data.log
