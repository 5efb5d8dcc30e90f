# Lease AK, call 2: join the model; what a prefill costs (one prompt, and 16 at a time),
# prefill graphs off and on in one process; where bench runs' time goes at batch 16 and 64
# (prefills, decode by batch size).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/ak2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
for g in 1 16; do
  echo "== prefill group $g"; timeout 120 python3 benchmarks/profile_prefill.py --device cuda:0 --model $GGUF --draft $H0 --dataset $MTBENCH \
    --num-prompts 64 --profiled 2 --rows 20 --group $g > $O/prefill_g$g.txt 2>&1; grep -E "^==" $O/prefill_g$g.txt
done
echo "== host"; timeout 240 python3 benchmarks/profile_host.py --device cuda:0 --model $GGUF --draft $H0 --dataset $MTBENCH \
  --num-prompts 80 --max-new-tokens 128 --modes plain,adaptive --batch-sizes 16,64 --no-cprofile > $O/host.txt 2>&1; grep -vE "^device" $O/host.txt
