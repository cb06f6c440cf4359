# Set-up and everyday commands. `make demo` and `make test` install whatever is missing first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.obliviate-installed
OUT    ?= runs/demo
SEED   ?= 0
TORCH  := torch==2.13.0
DEEPSPEED := deepspeed==0.19.8

.PHONY: install demo test test-all bench docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first, pinned, only if no torch is present; then the package with its dev extras,
# constrained to the torch that is installed so that no other package can upgrade it.
$(STAMP): $(PY) pyproject.toml
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH)
	@$(PY) -c "import torch; print('torch==' + torch.__version__)" > $(VENV)/torch-constraint.txt
	$(PY) -m pip install -q -c $(VENV)/torch-constraint.txt -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/obliviate demo --out $(OUT) --seed $(SEED)

# one worker per core, one torch thread per worker (two 2-thread processes on 2 cores spin against each other);
# whole files to each worker, the files of heavy end-to-end tests first (tests/conftest.py), so both end together
TESTFLAGS = -q -n auto --dist loadfile --no-loadscope-reorder
# the linter first (rules in pyproject.toml: pyflakes, syntax errors, lines over 120 columns)
LINT = $(VENV)/bin/ruff check src tests scripts
test: $(STAMP)
	$(LINT)
	OMP_NUM_THREADS=1 $(PY) -m pytest $(TESTFLAGS)

# the slow tests include DeepSpeed ZeRO-3 (docs/distributed.md): deepspeed is built without isolation,
# against the installed torch, and without its C++ ops (the one it needs compiles on first use)
test-all: $(STAMP)
	@$(PY) -c "import deepspeed" 2>/dev/null || ($(PY) -m pip install -q -c $(VENV)/torch-constraint.txt setuptools wheel \
		&& DS_BUILD_OPS=0 $(PY) -m pip install -q -c $(VENV)/torch-constraint.txt --no-build-isolation $(DEEPSPEED))
	$(LINT)
	OMP_NUM_THREADS=1 $(PY) -m pytest $(TESTFLAGS) -m ""

# the generated tables of docs/methods.md (tests/methods/test_docs.py fails when they are stale)
docs: $(STAMP)
	$(PY) -m obliviate.unlearning.docs docs/methods.md

bench: $(STAMP)
	$(VENV)/bin/obliviate bench --out runs/bench

clean:
	rm -rf runs .cache
