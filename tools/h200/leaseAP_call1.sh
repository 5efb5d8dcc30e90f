# Lease AP, call 1: stage the model's first half (nothing else: the lease is short).
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/ && echo staged
