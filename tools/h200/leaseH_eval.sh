# Lease H, last call: head D against the shipped head C on MT-bench (chain S=5; tree S=5
# K=4 N=16; tree S=8 K=4 N=48), then with the better one bs1 plain/chain/tree/adaptive and
# the adaptive sweep, 3 timed runs each (median), with captures-while-timed and the depths
# the adaptive mode ran (results.json); last, a torch-profiler view of plain/chain/tree.
source tools/h200/env.sh
O=/root/out/h4; mkdir -p $O
H0=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct
b() { timeout ${T:-90} python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --max-new-tokens 256 --dtype bfloat16 "$@" 2>&1 | grep -E "^bench: mode|tokens/s|rror" | tail -12; }
for h in /root/train/headD $H0; do echo "== $h"; b --draft $h --num-prompts 10 --batch-sizes 1 --modes chain,tree --no-split --repeats 1 --out $O/acc$(basename $h | cut -c1-8); done
echo "== D tree S8 N48"; b --draft /root/train/headD --num-prompts 10 --batch-sizes 1 --modes tree --spec-steps 8 --spec-draft-tokens 48 --no-split --repeats 1 --out $O/D8x48
echo "== bs1 (D)"; T=150 b --draft /root/train/headD --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree,adaptive --out $O/bs1
echo "== sweep (D)"; T=240 b --draft /root/train/headD --num-prompts 32 --max-new-tokens 128 --batch-sizes 4,16,64 --modes plain,adaptive --out $O/sweep
echo "== profile"; timeout 120 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --draft /root/train/headD --modes plain,chain,tree --tokens 64 --out $O/profile 2>&1 | tail -3
rm -f $O/*/*.png
tar czf $OUT/h4.tgz -C /root/out h4
