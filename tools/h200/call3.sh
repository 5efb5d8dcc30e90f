# Call 3: profile (random weights: per-iteration costs do not depend on them), then the
# bf16/fp32 lossless checks on the real model, then wait for the head.
source tools/h200/env.sh
mkdir -p $OUT/profile
timeout 150 python3 benchmarks/profile_decode.py --device cuda:0 --model random --tokens 64 --out $OUT/profile/random 2>&1 | grep -v USDT | tail -8
tail -3 /root/train/data.log; tail -3 /root/train/train.log 2>/dev/null
while [ ! -f /root/train/rc ]; do sleep 10; done
cat /root/train/rc; tail -15 /root/train/train.log
cp -r /root/train/eagle1-smollm2-135m-instruct $OUT/ ; cp /root/train/*.log $OUT/
