# Lease AK, call 4: the GPU suite.
source tools/h200/env.sh
O=$OUT/ak4; mkdir -p $O
echo "== gpu suite"; timeout 280 python3 -m pytest -q -m gpu -p no:cacheprovider tests > $O/gpu.txt 2>&1; tail -3 $O/gpu.txt
