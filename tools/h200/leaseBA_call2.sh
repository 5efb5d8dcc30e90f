# Lease BA, call 2: join the model, copy the checkout to /root/eh, start headE_job.sh in its
# own process session (it runs on past this call: the device README), wait for it.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
rm -rf /root/eh /root/train && mkdir -p /root/train && cp -r "$PWD" /root/eh && rm -rf /root/eh/.stage
setsid nohup bash /root/eh/tools/h200/headE_job.sh > /root/train/job.out 2>&1 < /dev/null &
sleep 2; bash tools/h200/wait_job.sh 550
