# Lease 2, call 2: stage the model, then GPU tests and the CUDA conformance suite.
source tools/h200/env.sh
bash tools/h200/stage_b.sh || exit 1
mkdir -p $OUT/tests $OUT/conformance
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs -k "not tensor_parallel and not train_draft" 2>&1 | tail -15 | tee $OUT/tests/gpu_tests.txt
timeout 120 python3 -m eagle_hal conformance --device cuda:0 --backend cuda --report $OUT/conformance/cuda.json 2>&1 | tail -14 | tee $OUT/conformance/cuda.log
