# Lease AJ, call 1: stage the model's first half; the CUDA graph tests (ragged prefills of
# several prompts from one graph per token bucket included); the CUDA conformance report.
source tools/h200/env.sh
mkdir -p /root/stage && cp .stage/a/part_aa /root/stage/
O=$OUT/aj1; mkdir -p $O
echo "== graph tests"; timeout 220 python3 -m pytest -q -p no:cacheprovider tests/backends/cuda -k "graph or prefill or ragged" > $O/graph_tests.txt 2>&1; tail -3 $O/graph_tests.txt
echo "== conformance"; timeout 300 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $O/cuda.json > $O/conformance.txt 2>&1; echo "conformance rc $?"
grep -E "total|graphs" $O/conformance.txt | tail -4
