source tools/h200/env.sh
O=/root/out/g5; mkdir -p $O
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
echo "== sweep (adaptive fixes)"; T=150 b --draft /root/train/headA --num-prompts 32 --max-new-tokens 128 --batch-sizes 1,4,16 --modes plain,adaptive --out $O/sweep
echo "== B tree S6 N32"; b --draft /root/train/headB --num-prompts 10 --batch-sizes 1 --modes tree --spec-steps 6 --spec-draft-tokens 32 --no-split --out $O/B6x32
echo "== B tree S8 N48"; b --draft /root/train/headB --num-prompts 10 --batch-sizes 1 --modes tree --spec-steps 8 --spec-draft-tokens 48 --no-split --out $O/B8x48
rm -f $O/*/*.png
tar czf $OUT/g5.tgz -C /root/out g5
