# Lease AQ, call 1 (not run yet): stage the model's first half. The lease trains an EAGLE-3
# head on head D's data recipe (issue 8, chain S=5 >= 3.0); it needs an H200: the EAGLE-3
# feature store keeps 4H numbers a token, 90 GiB for 21 M tokens (docs/training.md), so
# every call of this lease passes needs_h200.
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/ && echo staged
