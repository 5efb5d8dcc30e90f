# Lease AR (eighteenth session, run on an H100 in the session's last half hour): a first,
# small EAGLE-3 head. Call 1 = leaseAP_call1.sh (stage). The three later calls, as run:
# call 2: stage_b.sh; train-draft --stage data --device cuda:0 --model "$GGUF" --out /root/train/headE3
#   --data /root/train/broad.data.safetensors --num-prompts 100000 --gen-batch-size 256
#   --max-new-tokens 256 --max-prompt-tokens 128 --prompt-openers broad
#   --prompt-temperatures 0.7,0.85,1.0 --answer-temperatures 0,0,0.3,0.7 --seed 0 --time-budget-min 4
# call 3: train-draft --stage train --variant eagle3 --device cuda:0 --model "$GGUF" --out /root/train/headE3
#   --data /root/train/broad.data.safetensors --steps 20000 --batch-size 32 --unroll-steps 3 --seed 0
#   --validate-every 2000 --time-budget-min 5.5
# call 4: bench --device cuda:0 --backend cuda --model $GGUF --dataset $MTBENCH --dtype bfloat16
#   --draft /root/train/headE3 --max-new-tokens 256 --num-prompts 80 --batch-sizes 1
#   --modes plain,chain:S5,tree:S5K4N16 --draft-vocab full --repeats 1 --no-split
