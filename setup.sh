#!/usr/bin/env bash
# Installs everything aoe-tui needs on a fresh Debian/Ubuntu machine:
#   - system packages (systemd-nspawn, debootstrap, QEMU, ssh tools, curl, jq, iproute2)
#   - a Python virtual environment in .venv with aoe-tui and its test dependencies
# Safe to re-run; it only installs what is missing. Needs root (or sudo) for apt.
# Python packages come from requirements.lock (exact versions and hashes); ./setup.sh --lock
# refreshes that lock from pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")"

# ./setup.sh --lock: refresh requirements.lock from pyproject.toml (every dependency of aoe-tui
# and its [test,cluster] extras, transitive ones and the build's setuptools/wheel included, each
# with its PyPI hashes) using pip-tools' pip-compile in a throw-away venv, against the public index
# (AOE_LOCK_INDEX overrides it; local pip configuration is not used, so the lock names no local
# file). Then run ./setup.sh to install what it pinned, and the tests.
if [ "${1:-}" = --lock ]; then
  PY="${PYTHON:-python3}"
  tools=$(mktemp -d)
  trap 'rm -rf "$tools"' EXIT
  "$PY" -m venv "$tools/venv"
  export PIP_CONFIG_FILE=/dev/null
  index="${AOE_LOCK_INDEX:-https://pypi.org/simple}"
  "$tools/venv/bin/python" -m pip install -q --index-url "$index" pip-tools==7.7.0
  "$tools/venv/bin/pip-compile" --quiet --index-url "$index" --no-emit-index-url --no-emit-find-links \
    --generate-hashes --allow-unsafe --all-build-deps --extra test --extra cluster --strip-extras \
    --output-file requirements.lock pyproject.toml
  echo "setup: requirements.lock refreshed ($(grep -c '^[a-z]' requirements.lock) packages pinned)"
  exit 0
fi

APT_PACKAGES=(
  systemd-container debootstrap qemu-system-x86 qemu-utils e2fsprogs
  openssh-client sshpass curl jq iproute2 procps psmisc util-linux ca-certificates python3-venv
  chromium ripgrep
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "setup: installing system packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# node/npm: only to install the harness CLIs from npm (opencode-ai, @anthropic-ai/claude-code, @openai/codex)
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "setup: installing nodejs and npm (for the opencode adapter)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.aoe-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements.lock -nt "$stamp" ]; then
  echo "setup: installing aoe-tui into .venv (every dependency pinned and hash-checked by requirements.lock)"
  # The venv's own pip (bundled with this Python) installs exactly the lock: the same versions
  # on every machine, transitive ones included. Refresh the lock with: ./setup.sh --lock
  .venv/bin/python -m pip install -q --require-hashes -r requirements.lock
  # aoe-tui itself, editable, built with the lock's setuptools (no build isolation, no download).
  # Newer pips forward setuptools' informational "Editable installation" notice (a UserWarning
  # of the build backend); it says nothing about this install, so it is not shown.
  PYTHONWARNINGS=ignore::UserWarning .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
  touch "$stamp"
fi
# the opencode CLI (pinned; cached in ~/.cache/aoe-tui/opencode/, ~350 MB); skip with AOE_SKIP_OPENCODE=1
if [ "${AOE_SKIP_OPENCODE:-0}" != 1 ]; then
  .venv/bin/python -c "from aoe_tui.agents.opencode import ensure_opencode; print('setup: opencode at', ensure_opencode())"
fi
# Claude Code and Codex CLI (pinned; cached in ~/.cache/aoe-tui/{claude-code,codex}/, ~800 MB);
# only their native binaries are used, in the territory. Skip with AOE_SKIP_HARNESSES=1
if [ "${AOE_SKIP_HARNESSES:-0}" != 1 ]; then
  .venv/bin/python -c "
from aoe_tui.agents.registry import harness_adapters
for cls in harness_adapters():
    print('setup:', cls.harness.name, 'at', cls.harness.ensure())"
fi
echo "setup: ready (.venv/bin/aoe)"
