# Lease AE, call 2: join the model; where a bench run's wall time goes on the host
# (benchmarks/profile_host.py: prefills against decode steps, cProfile), plain and adaptive
# at batch 1 and 16; then batch 1 end to end, default against EAGLE_HAL_GEMV=6:g2x2pr2.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/ae2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== host profile"; timeout 240 python3 benchmarks/profile_host.py --device cuda:0 --model $GGUF --draft $H0 --dataset $MTBENCH \
  --num-prompts 40 --max-new-tokens 128 --modes plain,adaptive --batch-sizes 1,16 --top 40 > $O/host.txt 2>&1
grep -E "^==|calls|outside" $O/host.txt | head -40
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 "$@" 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; }
echo "== bs1 default"; T=150 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --no-split --repeats 3 --out $O/bs1_default
echo "== bs1 6:g2x2pr2"; EAGLE_HAL_GEMV=6:g2x2pr2 T=150 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --no-split --repeats 3 --out $O/bs1_r2
rm -f $O/*/*.png
