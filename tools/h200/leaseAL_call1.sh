# Lease AL, call 1: stage the model's first half; the CUDA graph tests after the per-token
# runs are built with list arithmetic and every upload is allocated pinned.
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/
O=$OUT/al1; mkdir -p $O
echo "== graph tests"; timeout 200 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda -k "graph or prefill or ragged" > $O/graph_tests.txt 2>&1; tail -3 $O/graph_tests.txt
