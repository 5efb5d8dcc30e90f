# Lease AB, call 2: join the model; batch 1 end to end, 10 MT-bench x 256, bf16, head C:
# HEAD's default (Triton softmax top-k in the draft) against torch's top-k, and with the
# best dot config from call 1 for the 5-16-row forwards (verify passes).
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=/root/out/ab2; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
pack() { rm -f $O/*/*.png; tar czf $OUT/ab2.tgz -C /root/out ab2; }
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $H0 "$@" 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20; }
WIDE=$(python3 - /root/out/ab1/micro.txt <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
head = next(l.split() for l in lines if l.split()[:2] == ["rows", "unfused"])
table = {int(l.split()[0]): dict(zip(head, (float(v.rstrip("x!")) for v in l.split()[:len(head)])))
         for l in lines if l.split() and l.split()[0].isdigit() and len(l.split()) >= len(head)}
dots = [n for n in head if n.endswith("d")]
best = min(dots, key=lambda n: table[6][n] + table[16][n])
print(best if table[6][best] + table[16][best] < table[6]["16x256x4x3"] + table[16]["16x256x4x3"] else "")
PY
)
echo "wide: '$WIDE'"
echo "== bs1 default"; T=200 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree,adaptive --no-split --repeats 3 --out $O/bs1_default; pack
if [ -n "$WIDE" ]; then echo "== bs1 wide $WIDE"; EAGLE_HAL_FUSED_LINEAR_WIDE=$WIDE T=150 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree --no-split --repeats 3 --out $O/bs1_wide; pack; fi
echo "== bs1 torch topk"; EAGLE_HAL_DRAFT_TOPK=torch T=120 b --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes chain,tree --no-split --repeats 3 --out $O/bs1_torchtopk; pack
echo "$WIDE" > /root/out/wide
