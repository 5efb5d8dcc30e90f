# Lease AN, call 4: MT-bench accept lengths of head C (shipped) and head D, each in its own
# process (chain S=5, tree S=5 K=4 N=16; 10 prompts x 256, bf16, batch 1); head D's larger
# tree; then batch 1 end to end with head D next to plain decoding (3 repeats).
source tools/h200/env.sh
O=$OUT/an4; mkdir -p $O
HC=core/src/eagle_hal/data/eagle1-smollm2-135m-instruct; HD=/root/train/headD
acc() {  # NAME HEAD EXTRA...
  local n=$1 h=$2; shift 2
  echo "== $n"; timeout 120 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
    --dtype bfloat16 --draft $h --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --no-split --repeats 1 \
    --out $O/$n "$@" 2>&1 | grep -E "^bench: mode|tokens/s \(|accept|rror|Error" | tail -8
}
acc accC $HC --modes chain,tree
acc accD $HD --modes chain,tree
acc treeD_s8n48 $HD --modes tree --spec-steps 8 --spec-draft-tokens 48
echo "== bs1D"; timeout 200 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft $HD --max-new-tokens 256 --num-prompts 10 --batch-sizes 1 --modes plain,chain,tree,adaptive --no-split \
  --repeats 3 --out $O/bs1D 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -20
rm -f $O/*/*.png
