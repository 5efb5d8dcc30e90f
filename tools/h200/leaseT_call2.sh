# Lease T, call 2: a batch change applies the iteration in flight to the requests still running (finish), calls that only launched are charged to the next observation; the controller timed by the period between calls (engine
# work included). Adaptive GPU tests; plain vs adaptive over batch sizes 1-64 on all 80
# MT-bench questions (the controller's estimates recorded per bucket); batch 1
# plain/tree/adaptive. Packed after each step.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/t2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/t2.tgz -C /root/out t2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror|Error" | tail -20; }
echo "== gpu tests: overlap, adaptive"; timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/cuda -k "overlapped" > $O/gpu_overlap_full.txt 2>&1; grep -v CUDAGraph.cpp $O/gpu_overlap_full.txt | grep -E "^(FAILED|ERROR|E  )|passed|failed|Error" | head -20 | tee $O/gpu_overlap.txt; pack
echo "== sweep"; T=420 b --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive --no-split --repeats 3 --out $O/sweep; pack
echo "== bs1 x5"; T=200 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,tree,adaptive --no-split --repeats 5 --out $O/bs1; pack
