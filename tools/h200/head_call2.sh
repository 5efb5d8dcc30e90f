# A draft head's lease, call 2, within 30 s of leaseBB_call1.sh (carrying .stage/b, .whl and
# the egg-infos): join the model, copy the checkout to /root/eh, start head_job.sh with this
# script's arguments in its own process session, wait. Then `bash tools/h200/wait_job.sh 560`
# every call (within 30 s) until it prints "job done".
# Usage: head_call2.sh NAME SEED DATA_MINUTES TRAIN_MINUTES
#   lease BD (head F): head_call2.sh F 2 8 13.5
#   lease BH (head G): CUDA_TESTS=0 DATA_WORKERS=2 ANSWER_TEMPS=0,0,0,0.3 head_call2.sh G 3 5.5 10
#   lease BI (head H): CUDA_TESTS=0 DATA_WORKERS=2 head_call2.sh H 4 8 13.5
#   lease BJ (head I, shipped): HEAD_SHAPE="--draft-layers 2 --draft-intermediate-size 640"
#     SHIPPED_BENCH=0 CUDA_TESTS=0 DATA_WORKERS=2 head_call2.sh I 5 8 13.5
[ $# -eq 4 ] || { echo "usage: head_call2.sh NAME SEED DATA_MINUTES TRAIN_MINUTES" >&2; exit 2; }
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
rm -rf /root/eh /root/train && mkdir -p /root/train && cp -r "$PWD" /root/eh && rm -rf /root/eh/.stage
setsid nohup bash /root/eh/tools/h200/head_job.sh "$@" > /root/train/job.out 2>&1 < /dev/null &
sleep 2; bash tools/h200/wait_job.sh 550
