# Lease N, call 2: after reverting lease M's top-1 draft (chain fell to 0.69x): batch 1
# plain/chain/tree, then the GPU suite once more (lease L had one unexplained failure).
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/n2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/n2.tgz -C /root/out n2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror|Error" | tail -14; }
echo "== bs1 plain,chain,tree"; T=200 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --out $O/bs1; pack
echo "== gpu tests"; timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rf -k "not tensor_parallel and not train_draft" > $O/gpu_full.txt 2>&1
grep -v "CUDAGraph.cpp" $O/gpu_full.txt | grep -E "^(FAILED|ERROR|E  )|passed|failed|Error" | head -40 | tee $O/gpu_tests.txt; pack
