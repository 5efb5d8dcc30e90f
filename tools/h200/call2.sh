# Call 2: stage the model, start the head's training detached, then GPU tests and the
# CUDA conformance suite (light; they share the GPU with data generation).
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
mkdir -p /root/train $OUT/tests $OUT/conformance
setsid nohup bash tools/h200/train_head.sh > /root/train/daemon.log 2>&1 < /dev/null &
sleep 2
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv | tee $OUT/tests/nvidia-smi.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" | tee -a $OUT/tests/nvidia-smi.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel" 2>&1 | tail -25 | tee $OUT/tests/gpu_tests.txt
timeout 260 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $OUT/conformance/cuda.json 2>&1 | tail -40 | tee $OUT/conformance/cuda.log
tail -3 /root/train/data.log
