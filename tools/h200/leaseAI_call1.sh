# Lease AI, call 1: the draft's padded extends after a prefix against eager on CUDA graphs
# (an attention-dependent head), with the rest of the CUDA graph tests.
source tools/h200/env.sh
O=$OUT/ai1; mkdir -p $O
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda -k "prefix or token_bucket" > $O/tests.txt 2>&1; tail -15 $O/tests.txt
