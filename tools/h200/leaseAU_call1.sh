# Lease AU (next session, needs ~24 device-minutes: ask for the lease first thing), call 1:
# stage the model's first half.
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/ && echo staged
