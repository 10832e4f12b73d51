# Attention, from scratch and autograded. Two commands do all the set-up on a fresh machine:
#   make lab    set up, then open JupyterLab on the course
#   make test   set up, then run every test (what CI runs)
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The gradebook: SQLite in grader/ by default; any SQLAlchemy URL (e.g. postgresql://...) by this one setting.
GRADEBOOK_URL ?= sqlite:///$(CURDIR)/grader/gradebook.db
export GRADEBOOK_URL
export JUPYTER_CONFIG_PATH := $(CURDIR)/grader
# The course's nbconvert template override (formgrader loads MathJax from the course's own server).
export JUPYTER_PATH := $(CURDIR)/grader/jupyter
export PATH := $(CURDIR)/$(BIN):$(PATH)
SUBMISSIONS ?= grader/work/submitted
REPORTS ?= reports
FEEDBACK ?= $(REPORTS)/feedback
PORT ?= 8888
LAB_ARGS ?=

.PHONY: setup lab test test-fast release dist release-assignment collect autograde feedback export samples benchmark mutants site clean help

help:
	@echo "make lab        set up and open JupyterLab on the course"
	@echo "make test       set up and run every test (CI runs this)"
	@echo "make release    regenerate notebooks/ from solutions/"
	@echo "make dist       the course's wheel and the learner bundle (notebooks + wheel) in dist/"
	@echo "make site       the course as a static website in build/site/html (serve: python -m http.server -d build/site/html)"
	@echo "make release-assignment NAME=<NN_name>   put a chapter in nbgrader's exchange (NBGRADER_EXCHANGE) for a hub's Assignments tab"
	@echo "make collect NAME=<NN_name>   gather the class's submissions from the exchange into grader/work/submitted/"
	@echo "make autograde SUBMISSIONS=<dir> REPORTS=<dir>   grade a class"
	@echo "make feedback   per-student HTML feedback (after autograde)"
	@echo "make export ROSTER=<canvas.csv>   grades for Canvas (canvas.csv) and any LMS (grades_wide.csv) in REPORTS"
	@echo "make benchmark  time the notebooks, the checks and grading; writes $(REPORTS)/benchmark.md and .json"
	@echo "make mutants    machine-made mutants of every reference through its check; writes tools/mutation/report.md and .json"

TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
$(STAMP): requirements.txt pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11 is needed (python3.11 or python3 on PATH)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# torch's CPU build from PyTorch's own index where it is reachable (a short timeout); else
	@# requirements.txt gets torch from PyPI: on Linux that is the CUDA build with NVIDIA's packages
	@# (several GB; it runs the course on the CPU all the same), on macOS and Windows the CPU build.
	$(BIN)/python -m pip install --quiet --timeout 10 --retries 0 --index-url $(TORCH_CPU_INDEX) \
	  "$$(grep -E '^torch==' requirements.txt)" 2>/dev/null \
	  || echo "note: $(TORCH_CPU_INDEX) is not reachable: torch comes from the default index (on Linux its CUDA build)"
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/jupyter server extension enable --sys-prefix nbgrader.server_extensions.formgrader >/dev/null
	touch $(STAMP)

# System packages from Debian, installed when missing and we may (root with apt-get), in one apt run:
# bubblewrap sandboxes the grading kernels (without it grading still runs with the same resource
# limits, but without namespaces, and says so); PostgreSQL is the server the class-scale gradebook
# test starts on loopback (tests/test_gradebook_postgres.py).
.PHONY: .system-checked
.system-checked:
	@missing=""; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	for pkg in $(DEBIAN_EXTRAS); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	command -v chromium >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing (Debian packages)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) || echo "warning: could not install$$missing"; \
	  else echo "warning: not installed:$$missing (bubblewrap: grading without namespaces; postgresql: its test is skipped; fonts: boxes in a browser; libjs-mathjax: formulas unrendered offline; chromium: the website is not tested in a browser)"; fi; \
	fi

# chromium (Debian's; a runner's google-chrome does too): tests/test_site.py opens the website in it.
# Also, where apt can: the fonts that draw the Chinese of every heading and the ✅ of every check in a
# browser (without them they show as boxes), and MathJax, served locally to formgrader and the site
# (no CDN: grading machines and CI have no network).
DEBIAN_EXTRAS := fonts-noto-cjk fonts-noto-color-emoji libjs-mathjax

# Grading needs only bubblewrap.
.PHONY: .sandbox-checked
.sandbox-checked:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || echo "warning: could not install bubblewrap"; \
	  else echo "warning: bubblewrap (bwrap) not found: grading will run without namespaces"; fi; }

setup: $(STAMP)

ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: setup
	$(BIN)/jupyter lab --port=$(PORT) --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks $(ROOT_FLAG) $(LAB_ARGS)

NBVAL := --nbval --nbval-sanitize-with grader/nbval_sanitize.cfg --nbval-current-env

# One pytest run: the tests of utils and the grader, every solution notebook under nbval, and every
# chapter run with other correct answers and as released, on TEST_WORKERS pytest-xdist workers
# (conftest.py: each module, notebook and chapter run stays on one worker; longest first). Three workers on 2 cores: much of a worker's time is a kernel's start-up and
# a sandbox's waiting. TEST_WORKERS=0 runs everything in this one process. --durations: where the time goes.
TEST_WORKERS ?= 3
test: setup .system-checked
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope --durations=15 tests solutions $(NBVAL)

test-fast: setup .system-checked
	$(BIN)/python -m pytest -q tests -m "not slow"

# The website: Sphinx + myst-nb from the executed solutions (demo cells and outputs) and the releases
# (exercises as learners get them); MathJax from libjs-mathjax; no network. tests/test_site.py checks it.
site: setup .system-checked
	$(BIN)/python tools/build_site.py

# The declarations of utils/checks render each exercise's docstring and rules block first.
release: setup
	$(BIN)/python tools/render_contracts.py --write
	$(BIN)/python -m grader release
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python tools/i18n.py build

# What the course ships without the repository (tools/dist.py): dist/attention_course_utils-<v>-py3-none-any.whl
# and dist/attention-course-<v>.zip (the learner releases of notebooks/, the wheel in wheels/, README.txt).
dist: setup
	$(BIN)/python tools/dist.py --out dist

# A hub with nbgrader's exchange: NBGRADER_EXCHANGE names its shared folder (grader/nbgrader_config.py;
# default grader/work/exchange). release-assignment puts notebooks/<NAME> there for the learners'
# Assignments tab (FORCE=1 replaces a release); collect gathers every submission (the latest per
# learner) into grader/work/submitted/<learner>/<NAME>/, for `make autograde`.
NAME ?=
release-assignment collect: setup
	@test -n "$(NAME)" || { echo "usage: make $@ NAME=<NN_name>, e.g. NAME=03_scaled_dot_product_attention"; exit 2; }
	$(BIN)/nbgrader $(if $(filter collect,$@),collect --update,release_assignment $(if $(FORCE),--force)) "$(NAME)"

autograde: setup .sandbox-checked
	$(BIN)/python -m grader autograde --submissions "$(SUBMISSIONS)" --reports "$(REPORTS)"

feedback: setup
	$(BIN)/python -m grader feedback --reports "$(REPORTS)" --out "$(FEEDBACK)"

# Grades for the LMS from the gradebook: REPORTS/lms/canvas.csv (with ROSTER, the gradebook CSV
# exported from Canvas), grades_wide.csv and unmatched.csv. MATCH=sis_login|sis_user_id|canvas_id,
# MISSING=empty|zero (a roster student without a submission).
ROSTER ?=
MATCH ?= sis_login
MISSING ?= empty
export: setup
	$(BIN)/python -m grader export --out "$(REPORTS)/lms" $(if $(ROSTER),--roster "$(ROSTER)") --match $(MATCH) --missing $(MISSING)

benchmark: setup .sandbox-checked
	$(BIN)/python -m grader benchmark --out "$(REPORTS)"

# Every one-place mutant of every reference (tools/mutate.py) through its check, in MUTANT_JOBS
# sandboxed worker processes with MUTANT_TIMEOUT seconds per mutant: per exercise killed, survived,
# equivalent (tools/mutants_equivalent.toml) and the kill rate, the messages' figure, every survivor.
MUTANT_JOBS ?= 2
MUTANT_TIMEOUT ?= 120
mutants: setup
	$(BIN)/python tools/mutate.py --jobs $(MUTANT_JOBS) --timeout $(MUTANT_TIMEOUT)

samples: setup
	$(BIN)/python -m grader samples --out grader/work/samples

clean:
	rm -rf grader/work grader/gradebook.db reports
