# Lease L, call 2: stage the model; the GPU test of speculative overlap first; batch 1
# plain/chain/tree with speculative iterations overlapped (spec/speculative_overlap.py);
# issue 8's tree (S=12, N=64) next to plain; the profile; the whole GPU suite. Outputs are
# packed after each step.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/l2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/l2.tgz -C /root/out l2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror|Error" | tail -14; }
echo "== gpu test: speculative overlap"; timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/cuda -k "overlapped" 2>&1 | tail -15 | tee $O/gpu_overlap.txt; pack
echo "== bs1 plain,chain,tree"; T=200 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --out $O/bs1; pack
echo "== plain + tree S12 N64"; T=150 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,tree --spec-steps 12 --spec-draft-tokens 64 --no-split --repeats 3 --out $O/C12x64; pack
echo "== profile"; timeout 100 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --draft $H0 --modes plain,chain,tree --tokens 64 --out $O/profile 2>&1 | grep -v USDT | cut -c1-300 | tail -4; pack
echo "== gpu tests"; timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -6 | tee $O/gpu_tests.txt; pack
