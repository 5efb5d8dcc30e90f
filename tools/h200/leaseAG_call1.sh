# Lease AG, call 1: stage the model's first half; the CUDA graph tests (prefills padded to
# a token bucket included, through the real CUDA graphs).
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/
O=$OUT/ag1; mkdir -p $O
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda -k "graph" > $O/graph_tests.txt 2>&1; tail -3 $O/graph_tests.txt
