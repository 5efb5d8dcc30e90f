# Lease M, call 2: stage the model; the GPU suite with the failure shown (lease L had one
# failure); batch 1 plain/chain/tree after the top-1 draft and the prefill warm-up;
# issue 8's tree next to plain; plain vs adaptive at batch 1-64. Packed after each step.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/m2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/m2.tgz -C /root/out m2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror|Error" | tail -14; }
echo "== gpu tests"; timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rf -k "not tensor_parallel and not train_draft" > $O/gpu_full.txt 2>&1
grep -v "CUDAGraph.cpp" $O/gpu_full.txt | grep -E "^(FAILED|ERROR|E  )|passed|failed|Error" | head -40 | tee $O/gpu_tests.txt; pack
echo "== bs1 plain,chain,tree"; T=200 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --out $O/bs1; pack
echo "== plain + tree S12 N64"; T=150 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,tree --spec-steps 12 --spec-draft-tokens 64 --no-split --repeats 3 --out $O/C12x64; pack
echo "== sweep"; T=200 b --draft $H0 --num-prompts 32 --max-new-tokens 128 --batch-sizes 1,4,16,64 --modes plain,adaptive --no-split --out $O/sweep; pack
