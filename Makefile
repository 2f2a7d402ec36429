# make book | make test | make refresh | make serve — each sets up .venv itself.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb)) $(sort $(wildcard book/*.ipynb))
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider

.PHONY: setup book test unit lint nbval bookcheck refresh serve clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "Built: open $(CURDIR)/_build/html/index.html (or run: make serve)"

test: lint unit nbval bookcheck

lint: $(STAMP)
	$(VENV)/bin/ruff check .

unit: $(STAMP)
	$(PY) -m pytest tests

nbval: $(STAMP)
	$(PY) -m pytest $(NBVAL) $(NOTEBOOKS)

bookcheck: $(STAMP)
	rm -rf _build/html
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	$(PY) -m pytest tests/test_built_book.py --built

# Re-execute every chapter in place, top to bottom, storing widget state for the website.
refresh: $(STAMP)
	$(PY) -m specnotes.refresh $(NOTEBOOKS)

serve:
	@echo "Serving _build/html on http://127.0.0.1:8000"
	$(PY) -m http.server 8000 --bind 127.0.0.1 --directory _build/html

clean:
	rm -rf _build
