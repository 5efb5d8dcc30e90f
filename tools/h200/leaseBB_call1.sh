# Lease BB, call 1: stage the model's first half (or run it after leaseBA's job, on the same
# machine, skipping the staging: the model is already there).
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/ && echo staged
