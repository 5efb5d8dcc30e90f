# Lease F, call 3: a torch-profiler view of plain, chain and tree decoding (real model,
# shipped head), then the longer training run detached (tools/h200/train_head4.sh, about
# 16 GPU-minutes: give it the rest of the lease and fetch its head in a last call).
source tools/h200/env.sh
O=/root/out/f3; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
timeout 150 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --draft $H --modes plain,chain,tree --tokens 64 --out $O/profile 2>&1 | tail -3
mkdir -p /root/train
setsid nohup bash tools/h200/train_head4.sh > /root/train/daemon.log 2>&1 < /dev/null &
tar czf $OUT/f3.tgz -C /root/out f3
