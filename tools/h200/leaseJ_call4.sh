# Lease J, call 4 (argument: the launch config to force, or "" for the default): plain vs
# adaptive over batch sizes 1-64 (32 prompts x 128 tokens, 3 timed runs each; adaptive
# iterations at S = 0 now overlap like plain ones), then a profile of plain decoding.
source tools/h200/env.sh
O=/root/out/j4; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
[ -n "$1" ] && export EAGLE_HAL_FUSED_LINEAR_CONFIG=$1
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
echo "== sweep (C, '$1')"; T=330 b --draft $H0 --num-prompts 32 --max-new-tokens 128 --batch-sizes 1,4,16,64 --modes plain,adaptive --out $O/sweep
echo "== profile"; timeout 120 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --draft $H0 --modes plain,chain --tokens 64 --out $O/profile 2>&1 | grep -v USDT | cut -c1-300 | tail -3
rm -f $O/*/*.png
tar czf $OUT/j4.tgz -C /root/out j4
