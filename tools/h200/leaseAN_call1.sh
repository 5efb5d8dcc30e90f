# Lease AN, call 1: stage the model's first half; the CUDA tests changed after lease AM
# (ragged prefills and draft extends after a prefix), with the rest of the graph tests.
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/
O=$OUT/an1; mkdir -p $O
echo "== graph tests"; timeout 240 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda \
  -k "graph or prefill or ragged or prefix or token_bucket" > $O/graph_tests.txt 2>&1; tail -3 $O/graph_tests.txt
