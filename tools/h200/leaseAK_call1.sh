# Lease AK, call 1: stage the model's first half; the ragged-prefill CUDA tests after the
# pinned-upload change (the per-token runs and extend lengths copied from pinned memory).
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/
O=$OUT/ak1; mkdir -p $O
echo "== graph tests"; timeout 200 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda -k "graph or prefill or ragged" > $O/graph_tests.txt 2>&1; tail -3 $O/graph_tests.txt
