# make book | make test | make refresh | make serve — each sets up .venv itself.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb)) $(sort $(wildcard book/*.ipynb))
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider

.PHONY: setup book test unit lint nbval bookcheck browser linkcheck linkcheck-external refresh serve clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "Built: open $(CURDIR)/_build/html/index.html (or run: make serve)"

test: lint unit nbval bookcheck browser

lint: $(STAMP)
	$(VENV)/bin/ruff check .

unit: $(STAMP)
	$(PY) -m pytest tests

nbval: $(STAMP)
	$(PY) -m pytest $(NBVAL) $(NOTEBOOKS)

bookcheck: $(STAMP)
	rm -rf _build/html
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	$(PY) -m pytest tests/test_built_book.py tests/test_site.py --built

# The built site in headless chromium, offline (apt-get install chromium). Builds first if needed.
browser: $(STAMP)
	test -f _build/html/book/intro.html || $(VENV)/bin/jupyter-book build . -W -n --keep-going
	$(PY) -m pytest tests/test_browser.py --built

# Internal links, anchors and assets of the built site (offline; Sphinx -n covers cross-references).
# Also run by bookcheck (all of tests/test_site.py), so make test includes it.
linkcheck: $(STAMP)
	test -f _build/html/book/intro.html || $(VENV)/bin/jupyter-book build . -W -n --keep-going
	$(PY) -m pytest tests/test_site.py --built -k "links or another_host"

# External URLs too (needs internet; not part of make test). Report: _build/linkcheck/_build/html/output.txt
linkcheck-external: $(STAMP)
	$(VENV)/bin/jupyter-book build . --builder linkcheck --path-output _build/linkcheck

# Re-execute every chapter in place, top to bottom, storing widget state for the website.
refresh: $(STAMP)
	$(PY) -m specnotes.refresh $(NOTEBOOKS)

serve:
	@test -f _build/html/index.html || { echo "no _build/html: run make book first"; exit 1; }
	@echo "Serving _build/html on http://127.0.0.1:8000"
	$(PY) -m http.server 8000 --bind 127.0.0.1 --directory _build/html

clean:
	rm -rf _build
