# Lease I, call 3: the adaptive sweep (3 timed runs each, warm-up at every controller
# bucket), head C's larger trees, the GPU tests.
source tools/h200/env.sh
O=/root/out/i3; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
echo "== sweep (C)"; T=260 b --draft $H0 --num-prompts 32 --max-new-tokens 128 --batch-sizes 1,4,16,64 --modes plain,adaptive --out $O/sweep
echo "== C tree S8 N48"; b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes tree --spec-steps 8 --spec-draft-tokens 48 --no-split --repeats 1 --out $O/C8x48
echo "== C tree S10 N64"; b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes tree --spec-steps 10 --spec-draft-tokens 64 --no-split --repeats 1 --out $O/C10x64
echo "== gpu tests"; timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -4 | tee $O/gpu_tests.txt
rm -f $O/*/*.png
tar czf $OUT/i3.tgz -C /root/out i3
