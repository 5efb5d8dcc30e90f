# Lease F (next session; not run yet), call 2: stage the model; GPU tests; then, with the
# GPU to ourselves, the bs1 MT-bench run of the final code (tree graph with its pool fix,
# fused projections) in a second process (the first after a machine start compiles Triton
# kernels: throw-away), and the batch sweep with the adaptive depth warm-up.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/f2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -4 | tee $O/gpu_tests.txt
b() { timeout ${T:-110} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --draft $H --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
T=60 b --num-prompts 2 --batch-sizes 1 --modes plain,chain,tree --out $O/throwaway > /dev/null
echo "== bs1"; b --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree,adaptive --out $O/bs1
echo "== sweep"; T=200 b --num-prompts 32 --max-new-tokens 128 --batch-sizes 4,16,64 --modes plain,adaptive --out $O/sweep
rm -f $O/*/*.png
tar czf $OUT/f2.tgz -C /root/out f2
