# Lease AJ, call 3: batch 1 end to end (10 MT-bench x 256, bf16, head C); the GPU suite.
source tools/h200/env.sh
O=$OUT/aj3; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== bs1"; timeout 220 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree,adaptive --no-split \
  --repeats 3 --out $O/bs1 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; rm -f $O/*/*.png
echo "== gpu suite"; timeout 250 python3 -m pytest -q -m gpu -p no:cacheprovider tests > $O/gpu.txt 2>&1; tail -3 $O/gpu.txt
