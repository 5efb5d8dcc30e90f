# Lease O, call 2: lease N's batch-1 run was noisy (plain runs 604 / 830 / 992); the same
# comparison again, 5 runs each, without the split pass.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
O=/root/out/o2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/o2.tgz -C /root/out o2; }
nproc; uptime
timeout 300 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 --draft $H0 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree \
  --no-split --repeats 5 --out $O/bs1 2>&1 | grep -E "^bench: mode|tokens/s|rror|Error" | tail -14; pack
