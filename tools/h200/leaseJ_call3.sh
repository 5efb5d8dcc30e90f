# Lease J, call 3 (argument: the launch config call 2's sweep found best at 1 row, e.g.
# 16x128x4x3x3): bs1 plain/chain/tree with it forced, the profile with it, head C's
# larger trees, the GPU tests (which also run the overlapped plain decoding).
source tools/h200/env.sh
O=/root/out/j3; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
export EAGLE_HAL_FUSED_LINEAR_CONFIG=$1
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
echo "== bs1 (C, $1)"; T=200 b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --out $O/bs1
echo "== profile ($1)"; timeout 150 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --draft $H0 --modes plain,chain --tokens 64 --out $O/profile 2>&1 | grep -v USDT | cut -c1-300 | tail -3
echo "== C tree S12 N96"; b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes tree --spec-steps 12 --spec-draft-tokens 96 --no-split --repeats 1 --out $O/C12x96
echo "== C tree S16 N128"; b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes tree --spec-steps 16 --spec-draft-tokens 128 --no-split --repeats 1 --out $O/C16x128
unset EAGLE_HAL_FUSED_LINEAR_CONFIG
echo "== gpu tests"; timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -4 | tee $O/gpu_tests.txt
rm -f $O/*/*.png
tar czf $OUT/j3.tgz -C /root/out j3
