# Lease BB, call 2: join the model (skipped where it is there); 16-bit forwards of 17-32 rows
# through the GEMMs (the default since the twenty-first session) against the fused
# projections (EAGLE_HAL_FUSED_MAX_ROWS_16BIT=32, the old split), batch 2, 8 and 32 where
# the verify passes, plain decoding and the tree draft steps fall in that range; 80 MT-bench
# first turns x 256 tokens, bf16, head D, medians of 3. Then the old split again, so that
# drift between the runs shows.
source tools/h200/env.sh
[ -f "$GGUF" ] || bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/bb2; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
sweep() {
  timeout 170 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
    --dtype bfloat16 --draft $H --num-prompts 80 --max-new-tokens 256 --batch-sizes 2,8,32 \
    --modes plain,adaptive --repeats 3 --no-split --out $O/$1 2>&1 | grep -E "^bench: mode|tokens/s \(|rror" | tail -12
}
echo "== GEMMs at 17-32 rows (default)"; sweep gemm
echo "== fused at 17-32 rows"; EAGLE_HAL_FUSED_MAX_ROWS_16BIT=32 sweep fused
rm -f $O/*/*.png
