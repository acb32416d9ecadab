# Two entry points do all set-up themselves on a fresh Debian + Python 3.11 machine:
#   make demo   installs what is needed and runs the end-to-end job
#   make test   installs what is needed and runs the whole test suite
#   make bench  runs the benchmarks (BENCH="snapshot merge" picks some)
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SYSPKGS := fuse3 libfuse3-dev pkg-config git gpg gpgsm
BROWSERPKGS := chromium chromium-driver
# the Claude Code tests (tests/test_integrations_claude_code.py) drive the real CLI, pinned, from npm, kept in the project
CLAUDE_CODE_VERSION := 2.1.332
NPM_TOOLS := .npm-tools

.PHONY: demo test bench soak sysdeps browsers claude-code venv clean

# $(call apt_missing,PKGS): install those of the Debian packages PKGS that are not installed
define apt_missing
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
endef

sysdeps:
	$(call apt_missing,$(SYSPKGS))

# the browser tests (tests/test_report_browser.py) drive Debian's headless chromium; no browser is downloaded
browsers:
	$(call apt_missing,$(BROWSERPKGS))

# the Claude Code CLI into $(NPM_TOOLS)/ (git-ignored); npm from Debian when missing
claude-code:
	@command -v npm >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq npm; }
	@test "$$($(NPM_TOOLS)/node_modules/.bin/claude --version 2>/dev/null | cut -d' ' -f1)" = "$(CLAUDE_CODE_VERSION)" || \
	  npm install --prefix $(NPM_TOOLS) --no-audit --no-fund -q @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)

$(STAMP): pyproject.toml | sysdeps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[fuse,model,dev]'
	$(PY) -m pip install -q ray==2.60.0
	touch $(STAMP)

# git-pf as the command server's C client (docs/server.md): built with the system C compiler,
# the console script kept as git-pf-python; with no compiler git-pf stays the Python client
CLIENT := $(VENV)/.c-client
$(CLIENT): $(STAMP) git_pf/cli/client.c git_pf/cli/client.py git_pf/cli/build_client.py git_pf/__init__.py
	$(PY) -m git_pf.cli.build_client $(VENV)/bin
	touch $(CLIENT)

venv: sysdeps $(STAMP) $(CLIENT)

# the command-line tests run a second time with the command server off (docs/server.md)
test: venv browsers claude-code
	$(PY) -m pytest -q
	GIT_PF_SERVER=0 $(PY) -m pytest -q tests/test_foundation_cli.py tests/test_field_cli.py tests/test_merge_cli.py tests/test_transport_cli.py tests/test_cli_startup.py

demo: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m git_pf.testing.demo

bench: venv claude-code
	@command -v git-lfs >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq git-lfs; }
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m benchmarks $(BENCH)

# soak and chaos (about 10 minutes; not part of test): SOAK="--exchanges 300 --kills 3" for a short one
soak: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m benchmarks.soak $(SOAK)
	PF_PROPERTY_EXAMPLES=2000 $(PY) -m pytest -q tests/test_hostile_property.py

clean:
	rm -rf $(VENV) build *.egg-info $(NPM_TOOLS)
