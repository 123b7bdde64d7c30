# gpupool: the two commands are `make run` and `make test`; both install first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PORT ?= 8000

.PHONY: install run test faults faults-busy lint bench clean

install: $(VENV)/.installed

# Reinstall only when the dependency list changes: quick when nothing changed.
$(VENV)/.installed: pyproject.toml cli/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpupool needs Python >= 3.11 (set PYTHON=python3.11)")'
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ./cli -e '.[test]'
	@# A venv from before the client had a distribution of its own: uninstalling the old server
	@# distribution took the `gpupool` script the client had just installed.
	@test -x $(VENV)/bin/gpupool || $(VENV)/bin/python -m pip install --quiet --no-deps --force-reinstall -e ./cli
	@touch $@

run: install
	PORT=$(PORT) bash scripts/run.sh

test: install
	bash scripts/test.sh

# The fault-injection scenarios at full size (100,000-operation storm, 100 worker kills, Redis
# down 60 s, PostgreSQL down 30 s); `make test` runs them reduced. Figures: test-artifacts/faults/.
faults: install
	GPUPOOL_FAULTS=full bash scripts/test.sh tests/faults -m faults -s

# The reduced fault suite twice with every core kept busy by stress-ng (a shared CI runner).
faults-busy: install
	bash scripts/faults_busy.sh

lint: install
	$(VENV)/bin/ruff check .

bench: install
	bash scripts/bench.sh

clean:
	rm -rf var/ staticfiles/ test-artifacts/
