# Lease BA (head E in one background job; needs about 23 device-minutes after the start),
# call 1: stage the model's first half. Call 2 (within 30 s): leaseBA_call2.sh carrying
# .stage/b, .whl and the egg-infos. Then `bash tools/h200/wait_job.sh 560` every call until it
# prints "job done" (each call within 30 s of the last, or the machine and the job are gone).
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/ && echo staged
