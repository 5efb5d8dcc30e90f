# Lease BC, call 2 (after leaseBB_call1.sh staged the first half): lease BB's comparison cut to
# what 8 device-minutes hold: batch 2 and 32, GEMMs at 17-32 rows (the default) against the
# fused projections (EAGLE_HAL_FUSED_MAX_ROWS_16BIT=32), plain and adaptive, medians of 3,
# every run's line printed so that a sweep cut short still shows what it measured.
source tools/h200/env.sh
[ -f "$GGUF" ] || bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/bc; mkdir -p $O
H=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
sweep() {
  timeout 150 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
    --dtype bfloat16 --draft $H --num-prompts 80 --max-new-tokens 256 --batch-sizes 2,32 \
    --modes plain,adaptive --repeats 3 --no-split --out $O/$1 2>&1 | grep -E "run [0-9]/|^bench: mode|tokens/s \(|rror" | tail -20
}
echo "== GEMMs at 17-32 rows (default)"; sweep gemm
echo "== fused at 17-32 rows"; EAGLE_HAL_FUSED_MAX_ROWS_16BIT=32 sweep fused
rm -f $O/*/*.png
