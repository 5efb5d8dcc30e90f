# Lease D, call 3: float32 lossless check (4 prompts x 128 tokens, also the CPU demo's
# comparison), the CUDA conformance suite with the fused projections, and a torch-profiler
# view of plain and chain decoding (real model, shipped head).
source tools/h200/env.sh
O=/root/out/d3; mkdir -p $O
timeout 100 python3 -m eagle_hal bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH \
  --num-prompts 4 --max-new-tokens 128 --batch-sizes 1 --dtype float32 --modes plain,chain,tree --out $O/fp32 2>&1 \
  | grep -E "^bench: mode|tokens/s|same|Error" | tail -8
timeout 200 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $O/cuda.json > $O/conformance.txt 2>&1; echo "conformance rc $?"
grep -E "fail|FAIL|RESULT|passed" $O/conformance.txt | tail -6
timeout 150 python3 benchmarks/profile_decode.py --device cuda:0 --model $GGUF --modes plain,chain --tokens 64 --out $O/profile 2>&1 | tail -4
python3 -c "import json; s=json.load(open('$O/profile/summary.json')); [print(m, round(v['wall_ms_per_iteration'],3), round(v['device_busy_ms_per_iteration'],3)) for m,v in s.items()]" 2>&1 | tail -3
rm -f $O/*/*.png
tar czf $OUT/d3.tgz -C /root/out d3
