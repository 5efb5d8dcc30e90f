# Lease BE, call 2 (within 30 s; carrying .stage/b, .whl, .stage/old and the egg-infos): join
# the model, then batch 1 on 40 MT-bench first turns x 256 tokens, bf16, head F, this
# session's code against 7bd37d0's (.stage/old) in the same call, new first then old.
source tools/h200/env.sh
bash tools/h200/stage_b.sh > /dev/null || exit 1
O=$OUT/be2; mkdir -p $O
bench() {  # out
  python3 -m eagle_hal bench --device cuda:0 --backend cuda --model "$GGUF" --dataset "$MTBENCH" \
    --dtype bfloat16 --draft core/src/eagle_hal/data/eagle1-smollm2-135m-instruct \
    --max-new-tokens 256 --num-prompts 40 --batch-sizes 1 --modes plain,chain:S5,tree:S5K4N16 \
    --draft-vocab full --repeats 3 --no-split --out $O/$1 > $O/$1.log 2>&1
  grep -E "plain|chain|tree" $O/$1.log | tail -4
}
bench new
OLD=$PWD/.stage/old
# the old sources first; the egg-infos (entry points) are found in the checkout's, after them
PYTHONPATH=$OLD/core/src:$OLD/backends/cuda/src:$OLD/backends/rocm/src:$OLD/backends/npu/src:$OLD/backends/xpu/src:$OLD/backends/musa/src:$PYTHONPATH bench old
python3 - <<'PY'
import json, os
out = os.environ["OUT"] + "/be2"
for name in ("new", "old"):
    r = json.load(open(f"{out}/{name}/results.json"))
    rows = r.get("results", r)
    print(name, json.dumps(rows)[:1500])
PY
