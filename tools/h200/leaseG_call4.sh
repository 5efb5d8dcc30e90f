# Lease G, call 4: MT-bench accept lengths of heads A, B and the shipped head (chain S=5;
# tree S=5 K=4 N=16), each in one run; then, with the best of the two new heads by held-out
# accept length, bs1 plain/chain/tree/adaptive (speed), larger trees, and the batch sweep.
source tools/h200/env.sh
O=/root/out/g4; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
for h in A B; do echo "== head $h"; b --draft /root/train/head$h --num-prompts 10 --batch-sizes 1 --modes chain,tree --no-split --out $O/acc$h; done
echo "== shipped"; b --draft $H0 --num-prompts 10 --batch-sizes 1 --modes chain,tree --no-split --out $O/acc0
BEST=$(python3 - <<'PY'
import json
def last(h):
    c = json.load(open(f"/root/train/head{h}/config.json"))["eagle_hal_training"]["validations"]
    return c[-1]["accept_length"]
print(max("AB", key=last))
PY
)
echo "best $BEST" | tee $O/best.txt; HB=/root/train/head$BEST
echo "== bs1"; b --draft $HB --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree,adaptive --out $O/bs1
echo "== tree S6 N32"; b --draft $HB --num-prompts 10 --batch-sizes 1 --modes tree --spec-steps 6 --spec-draft-tokens 32 --no-split --out $O/tree6x32
echo "== tree S8 N48"; b --draft $HB --num-prompts 10 --batch-sizes 1 --modes tree --spec-steps 8 --spec-draft-tokens 48 --no-split --out $O/tree8x48
echo "== sweep"; T=200 b --draft $HB --num-prompts 32 --max-new-tokens 128 --batch-sizes 4,16,64 --modes plain,adaptive --out $O/sweep
rm -f $O/*/*.png
tar czf $OUT/g4.tgz -C /root/out g4
