# Lease AU, call 4: head E on all 80 MT-bench first turns x 256 tokens, batch 1, bf16, next
# to plain decoding in one run (issue 8: chain S = 5 >= 3.0, tree K = 4, N >= 8 >= 3.5; head
# D on the H200, lease AO: 2.60 and 3.85 at S = 8, N = 48).
source tools/h200/env.sh
O=$OUT/au4; mkdir -p $O
timeout 300 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --dtype bfloat16 --draft /root/train/headE --max-new-tokens 256 --num-prompts 80 --batch-sizes 1 \
  --modes plain,chain:S5,tree:S5K4N16,tree:S8K4N48 --draft-vocab full --repeats 1 --no-split \
  --out $O/bs1E 2>&1 | grep -E "^bench: mode|tokens/s \(|rror|Error" | tail -12
rm -f $O/*/*.png
