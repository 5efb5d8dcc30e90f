# Lease BD (head F: head E's recipe with more data and training, 8 + 13.5 GPU-minutes), call
# 2 within 30 s of leaseBB_call1.sh (carrying .stage/b, .whl and the egg-infos): join the
# model, copy the checkout to /root/eh, start head_job.sh in its own process session, wait.
# Then `bash tools/h200/wait_job.sh 560` every call (within 30 s) until it prints "job done".
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
rm -rf /root/eh /root/train && mkdir -p /root/train && cp -r "$PWD" /root/eh && rm -rf /root/eh/.stage
setsid nohup bash /root/eh/tools/h200/head_job.sh F 2 8 13.5 > /root/train/job.out 2>&1 < /dev/null &
sleep 2; bash tools/h200/wait_job.sh 550
