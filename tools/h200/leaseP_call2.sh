# Lease P, call 2: the verify-to-extend part of overlapped speculative iterations as one
# graph (engine/iteration_graph.py). GPU tests of the overlap first; batch 1
# plain/chain/tree (5 runs, no split pass, then the split pass once); issue 8's tree next
# to plain; the profile; the whole GPU suite. Packed after each step.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/p2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/p2.tgz -C /root/out p2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror|Error" | tail -14; }
echo "== gpu test: overlap"; timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/cuda -k "overlapped" > $O/gpu_overlap_full.txt 2>&1; grep -v CUDAGraph.cpp $O/gpu_overlap_full.txt | grep -E "^(FAILED|ERROR|E  )|passed|failed|Error" | head -20 | tee $O/gpu_overlap.txt; pack
echo "== bs1 x5"; T=150 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --no-split --repeats 5 --out $O/bs1; pack
echo "== plain + tree S12 N64"; T=120 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,tree --spec-steps 12 --spec-draft-tokens 64 --no-split --repeats 3 --out $O/C12x64; pack
echo "== profile"; timeout 90 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --draft $H0 --modes chain,tree --tokens 64 --out $O/profile 2>&1 | grep -v USDT | cut -c1-250 | tail -3; pack
echo "== gpu tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rf -k "not tensor_parallel and not train_draft" > $O/gpu_full.txt 2>&1
grep -v "CUDAGraph.cpp" $O/gpu_full.txt | grep -E "^(FAILED|ERROR|E  )|passed|failed|Error" | head -40 | tee $O/gpu_tests.txt; pack
