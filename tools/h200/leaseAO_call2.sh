# Lease AO, call 2 (next session): join the model; with the shipped head D, the large tree
# (S=8, K=4, N=48: accept 3.91 in lease AN, alone) next to plain decoding;
# then the GPU suite.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/ao2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
echo "== tree S8 N48 vs plain"; timeout 200 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF \
  --dataset $MTBENCH --dtype bfloat16 --draft $H --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 \
  --modes plain,tree --spec-steps 8 --spec-draft-tokens 48 --no-split --repeats 3 --out $O/tree8x48 2>&1 \
  | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -12
echo "== gpu suite"; timeout 280 python3 -m pytest -q -m gpu -p no:cacheprovider tests > $O/gpu.txt 2>&1; tail -3 $O/gpu.txt
rm -f $O/*/*.png
