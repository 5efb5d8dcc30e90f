# Lease K, call 2: stage the model; the GPU tests (overlap's review mends); issue 8's tree
# target next to plain decoding in one run (head C, K=4, S=12, N=64); plain vs adaptive at
# batch 1 and 16 after the split-count fix. Outputs are packed after each step.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/k2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/k2.tgz -C /root/out k2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
echo "== gpu tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -4 | tee $O/gpu_tests.txt; pack
echo "== plain + tree S12 N64"; T=150 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,tree --spec-steps 12 --spec-draft-tokens 64 --no-split --repeats 2 --out $O/C12x64; pack
echo "== sweep 1,16"; T=200 b --draft $H0 --num-prompts 32 --max-new-tokens 128 --batch-sizes 1,16 --modes plain,adaptive --no-split --out $O/sweep; pack
