# Lease AD, call 2: join the model; batch 1 end to end, 10 MT-bench x 256, bf16, head C:
# HEAD's default against the call-1 choice of EAGLE_HAL_GEMV (rows dealt over the grid).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=/root/out/ad2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/ad2.tgz -C /root/out ad2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 "$@" 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; }
GEMV=$(head -1 /root/out/gemv 2>/dev/null); echo "gemv: '$GEMV'"
echo "== bs1 default"; T=200 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree,adaptive --no-split --repeats 3 --out $O/bs1_default; pack
if [ -n "$GEMV" ]; then echo "== bs1 gemv $GEMV"; EAGLE_HAL_GEMV=$GEMV T=200 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree,adaptive --no-split --repeats 3 --out $O/bs1_gemv; pack; fi
echo "== profile"; EAGLE_HAL_GEMV=${GEMV:-4:g2x2p} timeout 100 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --draft $H0 --modes plain,chain,tree --tokens 64 --out $O/profile 2>&1 | grep -v USDT | cut -c1-300 | tail -4; pack
