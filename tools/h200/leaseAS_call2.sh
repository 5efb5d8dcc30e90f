# Lease AS, call 2: join the model; issue 7's "adaptive never slower than plain across
# batch 1-64" in ONE sweep at the issue's 256 tokens (lease AO swept 128 tokens: 0.88x at
# batch 64; lease AP ran 512 at batch 64 alone: 1.17x), with the time ledger and the
# controller's switch log (why each bucket changed depth); then a profile of batch-1
# iterations with head D (the last one, lease AD, had head C).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/as2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== sweep 80 x 256, plain vs adaptive"; timeout 420 python3 -m eagle_hal bench --device cuda:0 --backend cuda \
  --model $GGUF --dataset $MTBENCH --dtype bfloat16 --draft $H --max-new-tokens 256 --num-prompts 80 \
  --batch-sizes 1,4,16,64 --modes plain,adaptive --repeats 3 --no-split --out $O/sweep 2>&1 \
  | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -16
rm -f $O/*/*.png
echo "== profile, batch 1"; timeout 120 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --draft $H \
  --modes plain,chain,tree --tokens 64 --out $O/profile 2>&1 | tail -4
ls -la $O $O/*
