# Call 2: join the model's two halves, install the carried gguf wheel.
set -e
cat /root/stage/part_aa .stage/b/part_ab > "$GGUF"
echo "$(cat .stage/b/sha)  $GGUF" | sha256sum -c -
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -c "import gguf, eagle_hal; from eagle_hal import registry; print('gguf', gguf.__file__)"
