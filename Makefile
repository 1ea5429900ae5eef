# The two commands of the README:
#   make run    set up .venv and start the daemon (ws://127.0.0.1:8765)
#   make test   set up .venv and run the whole suite (lint, types, tests)
# Afterwards .venv/bin/executor is the CLI.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LISTEN ?= ws://127.0.0.1:8765
TEST_PLUGINS := build/test-plugins

.PHONY: run test setup setup-test lint typecheck pytest bench clean

# Quiet recipes and no "Entering directory" lines: the daemon's URL is run's first stdout line.
MAKEFLAGS += --no-print-directory

run: setup
	@$(BIN)/executor serve --listen $(LISTEN)

test: setup-test lint typecheck pytest

setup: $(VENV)/.installed

setup-test: $(VENV)/.installed-test

$(VENV)/bin/python:
	@$(PYTHON) scripts/check_python.py
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip >&2

# The C sources too: an editable install compiles the native launcher and the WebSocket
# frame loops in place.
$(VENV)/.installed: $(VENV)/bin/python pyproject.toml setup.py executor/spawn/launcher.c \
		executor/spawn/sandbox.c executor/spawn/sandbox.h executor/spawn/command_spawn.c \
		executor/spawn/command_spawn.h executor/transports/_frames.c
	@scripts/ensure-system-deps.sh
	@# Venvs made before the distribution was renamed hold it under its old name too.
	@$(BIN)/python -m pip uninstall --quiet --yes executor >&2 2>/dev/null || true
	@$(BIN)/python -m pip install --quiet -e '.[fast]' >&2
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml $(shell find tests/thirdparty_backend -type f -not -path '*/__pycache__/*' 2>/dev/null)
	$(BIN)/python -m pip install --quiet -e '.[fast,test]'
	# The third-party backend fixture is installed with pip into its own target directory, so
	# it is discovered through real entry points by the tests, but never by `make run`.
	rm -rf $(TEST_PLUGINS)
	$(BIN)/python -m pip install --quiet --no-deps --target $(TEST_PLUGINS) ./tests/thirdparty_backend
	touch $@

lint: setup-test
	$(BIN)/ruff check executor plugins tests bench scripts setup.py conftest.py
	$(BIN)/ruff format --check executor plugins tests bench scripts setup.py conftest.py
	# The architecture's import rules (pyproject.toml [tool.importlinter], docs/architecture.md).
	$(BIN)/lint-imports

typecheck: setup-test
	$(BIN)/mypy

# The suite runs on PYTEST_WORKERS processes (pytest-xdist), a test module's tests on one of
# them (its module fixtures start once): most tests wait on real processes and daemons, so
# two workers fit CI's two cores. PYTEST_WORKERS=0 runs in one process (a debugger, -x).
PYTEST_WORKERS ?= 2
pytest: setup-test
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

bench: setup
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build .mypy_cache .ruff_cache .pytest_cache .hypothesis .import_linter_cache
