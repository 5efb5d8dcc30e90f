# Lease AO, call 1 (next session): stage the model's first half; the CUDA graph tests and the
# conformance report after graph_runner's captured forward moved to engine/forward_graph.py
# (a move, CPU-tested with emulated graphs only in the fourteenth session).
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/
O=$OUT/ao1; mkdir -p $O
echo "== graph tests"; timeout 240 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda \
  -k "graph or prefill or ragged or prefix or token_bucket" > $O/graph_tests.txt 2>&1; tail -3 $O/graph_tests.txt
echo "== conformance"; timeout 300 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $O/cuda.json > $O/conformance.txt 2>&1; echo "conformance rc $?"
grep -E "total|graphs|model_kernels  " $O/conformance.txt | tail -5
