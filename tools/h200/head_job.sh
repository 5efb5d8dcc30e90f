# A draft head's whole job in one process session, as headE_job.sh ran head E: data,
# training, then 80 MT-bench first turns next to plain decoding, and the shipped head on the
# same prompts and machine. Started by head_call2.sh with setsid from a copy of the
# checkout (/root/eh), so it outlives the 10-minute call; wait_job.sh waits for it.
# Usage: head_job.sh NAME SEED DATA_MINUTES TRAIN_MINUTES (ANSWER_TEMPS=... overrides the
# answers' temperatures, 0,0,0.3,0.7; GEN_BATCH the data stage's batch, 256; DATA_WORKERS
# its processes, 2 (lease BH: 1.41x one process's tokens/s on an H100); CUDA_TESTS=0 skips the
# CUDA tests at the end; SHIPPED_BENCH=0 the shipped head's MT-bench run, about a minute;
# HEAD_SHAPE adds training flags that shape the head, e.g. "--draft-layers 2
# --draft-intermediate-size 640" for a stacked EAGLE-1 head of about 9.3 MB)
# Issue 8: data + training under 25 GPU-minutes; chain S = 5 >= 3.0 and tree K = 4, N >= 8
# >= 3.5 (head F on an H100: 2.81, 4.13).
NAME=$1; SEED=$2; DATA_MIN=$3; TRAIN_MIN=$4
cd /root/eh || exit 1
source tools/h200/env.sh
T=/root/train; H=$T/head$NAME; mkdir -p $T/out
note() { echo "$(date -u +%H:%M:%S) $*" >> $T/status; }
note "start head $NAME: seed $SEED, data $DATA_MIN min, training $TRAIN_MIN min"
# the host's own work per request and decode step on this machine's CPU (no GPU, ~1 min;
# CPU cores the data stage leaves idle): with the data log's ms a decode step it tells
# whether the data stage waits on the host or on the device
(python3 benchmarks/bench_engine_host.py --batch-sizes 64,256 --temperature 0.7 \
  > $T/host.txt 2>&1 &)
data() {  # workers, minutes
  python3 -m eagle_hal train-draft --stage data --device cuda:0 --model "$GGUF" \
    --out $H --data $T/data.safetensors --data-workers $1 \
    --num-prompts 400000 --gen-batch-size ${GEN_BATCH:-256} --max-new-tokens 256 --max-prompt-tokens 128 \
    --prompt-openers broad-passages --prompt-temperatures 0.7,0.85,1.0 \
    --answer-temperatures "${ANSWER_TEMPS:-0,0,0.3,0.7}" --seed $SEED --time-budget-min $2
}
# DATA_WORKERS processes share the GPU (train.distill_workers; default 2, untried on a GPU
# before this job): if that fails, one process generates for the minutes left
start=$SECONDS
data ${DATA_WORKERS:-2} $DATA_MIN > $T/data.log 2>&1
rc=$?; note "data rc $rc (${DATA_WORKERS:-2} workers)"
if [ $rc -ne 0 ]; then
  left=$(python3 -c "print(round($DATA_MIN - ($SECONDS - $start) / 60, 2))")
  data 1 $left > $T/data1.log 2>&1; note "data rc $? (1 worker, $left min)"
fi
python3 -m eagle_hal train-draft --stage train --device cuda:0 --model "$GGUF" \
  --out $H --data $T/data.safetensors \
  --steps 60000 --batch-size 32 --unroll-steps 3 --seed 0 --validate-every 4000 \
  --regression-weight 0.0 --cross-entropy-weight 1.0 --time-budget-min $TRAIN_MIN \
  ${HEAD_SHAPE:-} > $T/train.log 2>&1
note "train rc $?"
bench() {  # head, out, modes
  python3 -m eagle_hal bench --device cuda:0 --backend cuda --model "$GGUF" --dataset "$MTBENCH" \
    --dtype bfloat16 --draft $1 --max-new-tokens 256 --num-prompts 80 --batch-sizes 1 \
    --modes $3 --draft-vocab full --repeats 1 --no-split --out $T/out/$2
}
bench $H bs1new plain,chain:S5,tree:S5K4N16,tree:S8K4N48 > $T/bench.log 2>&1
note "bench rc $?"
if [ "${SHIPPED_BENCH:-1}" != 0 ]; then
  bench core/src/eagle_hal/data/eagle1-smollm2-135m-instruct bs1shipped plain,chain:S5,tree:S8K4N48 \
    > $T/benchD.log 2>&1
  note "bench shipped rc $?"
fi
# the CUDA checks of the code the job ran (sessions 24-25: rotary table, grow and organize
# kernels, draft-loop graphs without their copies; lease BF's list), on the idle GPU
if [ "${CUDA_TESTS:-1}" != 0 ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/core/ops/triton/test_kernels.py \
    tests/core/spec/test_chain_layout.py tests/core/model/test_rotary.py \
    tests/backends/cuda/test_cuda_graphs.py > $T/tests.txt 2>&1
  note "cuda tests rc $? ($(tail -1 $T/tests.txt))"
fi
touch $T/done
