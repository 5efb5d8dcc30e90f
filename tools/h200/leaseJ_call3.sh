# Lease J, call 3 (argument: the launch config call 2's sweep found best at 1 row, e.g.
# 16x128x4x3x3): bs1 plain/chain/tree with it forced, head C's S=12 N=96 tree, the GPU
# tests (which also run the overlapped plain decoding).
source tools/h200/env.sh
O=/root/out/j3; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
export EAGLE_HAL_FUSED_LINEAR_CONFIG=$1
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
echo "== bs1 (C, $1)"; T=200 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --out $O/bs1
echo "== C tree S12 N96 ($1)"; b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes tree --spec-steps 12 --spec-draft-tokens 96 --no-split --repeats 1 --out $O/C12x96
unset EAGLE_HAL_FUSED_LINEAR_CONFIG
echo "== gpu tests"; timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -4 | tee $O/gpu_tests.txt
rm -f $O/*/*.png
tar czf $OUT/j3.tgz -C /root/out j3
