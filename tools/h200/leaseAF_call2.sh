# Lease AF, call 2: join the model; one prefill on the host and the device
# (benchmarks/profile_prefill.py), target alone and with the draft head.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/af2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
timeout 300 python3 benchmarks/profile_prefill.py --device cuda:0 --model $GGUF --draft $H0 --dataset $MTBENCH \
  --num-prompts 20 --profiled 5 --rows 30 > $O/prefill.txt 2>&1; grep -E "^==|Self CUDA time total|Self CPU time total" $O/prefill.txt
