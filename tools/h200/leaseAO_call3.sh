# Lease AO, call 3: the adaptive controller with the long accept memory across batch sizes
# (80 x 128, bs 1/4/16/64, as lease AN's call 5; the head's default draft vocabulary),
# then the GPU suite.
source tools/h200/env.sh
O=$OUT/ao3; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== sweep"; timeout 300 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H --max-new-tokens 128 --num-prompts 80 --batch-sizes 1,4,16,64 --modes plain,adaptive --draft-vocab full --no-split \
  --out $O/sweep 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; rm -f $O/*/*.png
echo "== gpu suite"; timeout 280 python3 -m pytest -q -m gpu -p no:cacheprovider tests > $O/gpu.txt 2>&1; tail -3 $O/gpu.txt
