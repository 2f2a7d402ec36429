# make book | make test | make refresh | make serve — each sets up its environment itself.
#   .venv       everything (make setup): torch (the CPU build where there is no NVIDIA GPU), the package,
#               what the chapters import, the book's tools, the checks
#   .venv-book  the website only (make book): built from the notebooks' stored outputs, no torch
PYTHON    ?= python3
VENV      ?= .venv
BOOK_VENV ?= .venv-book
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.installed
BOOK_STAMP := $(BOOK_VENV)/.installed
CHAPTERS  := $(sort $(wildcard notebooks/*.ipynb))
NOTEBOOKS := $(CHAPTERS) $(sort $(wildcard book/*.ipynb))
# The chapters whose cells measure this device: checked again with bf16 math (SPECNOTES_DTYPE).
MEASURED  := $(wildcard notebooks/01_*.ipynb notebooks/02_*.ipynb notebooks/04_*.ipynb notebooks/05_*.ipynb notebooks/10_*.ipynb notebooks/11_*.ipynb)
# llama.cpp's llama-server (make engine): the llama-cpp-python sdist version pinned in specnotes.serve.engine.
ENGINE_VERSION := $(shell sed -n 's/^LLAMA_CPP_PYTHON = "\([^"]*\)".*/\1/p' src/specnotes/serve/engine/build.py)
# The chapter make test runs in a fresh torch-only environment, as in Colab (make colab: all of them).
COLAB_ONE ?= 03_acceptance
NBVAL     := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider

.PHONY: setup book test lint unit nbval nbval-bf16 colab-one colab bookcheck browser linkcheck linkcheck-external \
        refresh serve clean engine engine-smoke chapter fuzz

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml scripts/install_torch.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PYTHON) scripts/install_torch.py $(PY)
	$(PY) -m pip install -q -r requirements.txt
	touch $(STAMP)

$(BOOK_STAMP): pyproject.toml
	test -x $(BOOK_VENV)/bin/python || $(PYTHON) -m venv $(BOOK_VENV)
	$(BOOK_VENV)/bin/python -m pip install -q -e ".[book]"
	@! $(BOOK_VENV)/bin/python -c "import torch" 2>/dev/null || { echo "torch got into $(BOOK_VENV)"; exit 1; }
	touch $@

book: $(BOOK_STAMP)
	$(BOOK_VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "Built: open $(CURDIR)/_build/html/index.html (or run: make serve)"

test: lint unit nbval nbval-bf16 colab-one bookcheck browser engine-smoke

# ruff, then the layer contracts in pyproject.toml ([tool.importlinter]): an import that runs up a layer fails here.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

unit: $(STAMP)
	$(PY) -m pytest tests

# The file readers' fuzzers at 10,000 examples each (make unit runs them at 100): a config.json, a record, a GGUF
# header; about 3 CPU-minutes (tests/test_readers.py).
fuzz: $(STAMP)
	SPECNOTES_FUZZ_EXAMPLES=10000 $(PY) -m pytest tests/test_readers.py -p no:cacheprovider

nbval: $(STAMP)
	SPECNOTES_DTYPE=float32 $(PY) -m pytest $(NBVAL) $(NOTEBOOKS)

nbval-bf16: $(STAMP)
	SPECNOTES_DTYPE=bfloat16 $(PY) -m pytest $(NBVAL) $(MEASURED)

# One chapter's checks alone: make chapter N=10 (nbval in float32, and in bf16 for a measured chapter; its problems).
chapter: $(STAMP)
	@test -n "$(N)" || { echo "usage: make chapter N=10"; exit 2; }
	SPECNOTES_DTYPE=float32 $(PY) -m pytest $(NBVAL) notebooks/$(N)_*.ipynb
	$(if $(filter notebooks/$(N)_%,$(MEASURED)),SPECNOTES_DTYPE=bfloat16 $(PY) -m pytest $(NBVAL) notebooks/$(N)_*.ipynb)
	$(PY) -m pytest tests/pages/test_exercises.py -q -k "ch$(patsubst 0%,%,$(N)). or chapter_$(patsubst 0%,%,$(N))_"

colab-one: $(STAMP)
	$(PY) -m pytest tests/test_colab.py -m colab -k $(COLAB_ONE)

# Every chapter in a fresh environment with torch only, installed by its own first cell (minutes).
colab: $(STAMP)
	$(PY) -m pytest tests/test_colab.py -m colab

# The website built without torch (make book), then checked: every page, glue, links, no CDN, status page.
bookcheck: $(STAMP)
	rm -rf _build/html
	$(MAKE) book
	$(PY) -m pytest tests/test_built_book.py tests/test_site.py tests/test_readability.py -m built

# The built site in headless chromium, offline (apt-get install chromium). Builds first if needed.
browser: $(STAMP)
	test -f _build/html/book/intro.html || $(MAKE) book
	$(PY) -m pytest tests/test_browser.py -m browser

# Internal links, anchors and assets of the built site (offline; Sphinx -n covers cross-references).
# Also run by bookcheck, so make test includes it.
linkcheck: $(STAMP)
	test -f _build/html/book/intro.html || $(MAKE) book
	$(PY) -m pytest tests/test_site.py -m built -k "links or another_host"

# External URLs too (needs internet; not part of make test). Report: _build/linkcheck/_build/html/output.txt
linkcheck-external: $(BOOK_STAMP)
	$(BOOK_VENV)/bin/jupyter-book build . --builder linkcheck --path-output _build/linkcheck

# llama.cpp's llama-server built from the pinned llama-cpp-python sdist (CPU, Release, the server target only;
# cmake and g++ needed) into _build/engine/, kept across runs; then the shipped pair converted to GGUF.
engine: $(STAMP)
	PYTHON=$(PY) scripts/build_engine.sh $(ENGINE_VERSION) _build/engine
	$(PY) -m specnotes.serve.engine convert

# The engine end to end on loopback: conversion checks (byte round trip, greedy equality), then S(B) at two
# concurrencies, speculation off and on, through bench serve's client (tests/serve/test_engine.py).
engine-smoke: engine
	$(PY) -m pytest tests/serve/test_engine.py -m engine

# Re-execute every chapter in place, top to bottom, storing widget state for the website.
refresh: $(STAMP)
	$(PY) -m specnotes.pages.refresh $(NOTEBOOKS)

serve:
	@test -f _build/html/index.html || { echo "no _build/html: run make book first"; exit 1; }
	@echo "Serving _build/html on http://127.0.0.1:8000"
	$(PYTHON) -m http.server 8000 --bind 127.0.0.1 --directory _build/html

clean:
	rm -rf _build
