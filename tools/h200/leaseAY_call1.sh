# Lease AY (twenty-first session), call 1: stage the model's first half.
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/ && echo staged
