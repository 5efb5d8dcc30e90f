# Lease AH, call 1: the CUDA conformance report with the prefill graphs and the review
# mends (commit ccf8c85); the CUDA graph tests again.
source tools/h200/env.sh
O=$OUT/ah1; mkdir -p $O
echo "== conformance"; timeout 240 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $O/cuda.json > $O/conformance.txt 2>&1; echo "conformance rc $?"
grep -E "total|graphs" $O/conformance.txt | tail -4
echo "== graph tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda -k "graph" > $O/graph_tests.txt 2>&1; tail -2 $O/graph_tests.txt
