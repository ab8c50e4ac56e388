#!/usr/bin/env bash
# Idempotent installer for the VS Code end-to-end test (tests/e2e/test_vscode.py).
#
# Installs, reusing whatever is already there:
#   - Debian packages: chromium, ripgrep, and the headers code-server's native modules build with;
#   - code-server (a real VS Code served to a browser) and playwright-core, under $FXLS_E2E_CACHE
#     (default ~/.cache/fxls-e2e), never inside the repository;
#   - a virtualenv with only torch (no fxls, no pygls) under $FXLS_E2E_CACHE/torch-only-venv: the
#     interpreter the test gives VS Code, so the .vsix's bundled fxls is what runs;
#   - the fxls extension's npm dependencies, then builds and packages it to vscode-extension/fxls.vsix
#     with the documented command (`npm ci && npm run package`, which bundles fxls and its
#     pure-Python dependencies into bundled/libs).
# On success the last line of stdout is a JSON object with the paths the test needs.
# Exit status 3: a prerequisite could not be installed (no registry, no apt, not root);
# any other failure (building the extension, say) is a real error.
# Works with the stock Node 20: code-server 4.100.x is the newest line that runs on it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
CACHE="${FXLS_E2E_CACHE:-$HOME/.cache/fxls-e2e}"
CODE_SERVER_VERSION="${FXLS_CODE_SERVER_VERSION:-4.100.3}"
PLAYWRIGHT_VERSION="1.65.1"
# code-server's @vscode/ripgrep postinstall downloads this file unless it is already cached.
RIPGREP_CACHE_NAME="vscode-ripgrep-cache-1.15.11"
RIPGREP_TARBALL="ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz"

export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
SECONDS=0
step() { echo "fxls-e2e setup [${SECONDS}s]: $*" >&2; }

# One run at a time: .ci/test starts one in the background while the other tests run, and the
# test's own run waits here for it, then finds everything in place.
mkdir -p "$CACHE"
if command -v flock >/dev/null; then
  exec 9>"$CACHE/.setup.lock"
  flock 9
fi

need_apt=()
for pkg in chromium ripgrep libkrb5-dev libxkbfile-dev libsecret-1-dev libx11-dev pkg-config; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  step "apt-get install ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  command -v apt-get >/dev/null || { echo "no apt-get to install ${need_apt[*]}" >&2; exit 3; }
  $SUDO apt-get update -q >&2 || exit 3
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}" >&2 || exit 3
fi
CHROMIUM="$(command -v chromium)"

mkdir -p "$CACHE"
CS_DIR="$CACHE/code-server-$CODE_SERVER_VERSION"
CS_BIN="$CS_DIR/node_modules/code-server/out/node/entry.js"
if [ ! -f "$CS_DIR/.complete" ]; then
  step "npm install code-server@$CODE_SERVER_VERSION into $CS_DIR"
  rm -rf "$CS_DIR"
  mkdir -p "$CS_DIR/tmp/$RIPGREP_CACHE_NAME"
  # Seed @vscode/ripgrep's download cache with Debian's rg (no downloads outside the registries).
  rgtmp="$(mktemp -d)"
  cp "$(command -v rg)" "$rgtmp/rg"
  tar -C "$rgtmp" -czf "$CS_DIR/tmp/$RIPGREP_CACHE_NAME/$RIPGREP_TARBALL" rg
  rm -rf "$rgtmp"
  echo '{"private": true}' >"$CS_DIR/package.json"
  (
    cd "$CS_DIR"
    TMPDIR="$CS_DIR/tmp" npm_config_yes=true npm_config_unsafe_perm=true \
      npm_config_nodedir="$(dirname "$(dirname "$(command -v node)")")" \
      npm install --no-save --foreground-scripts "code-server@$CODE_SERVER_VERSION" >"$CS_DIR/install.log" 2>&1
  ) || { tail -40 "$CS_DIR/install.log" >&2; exit 3; }
  rm -rf "$CS_DIR/tmp"
  touch "$CS_DIR/.complete"
fi

DRIVER_DIR="$CACHE/driver"
if [ ! -f "$DRIVER_DIR/node_modules/playwright-core/package.json" ] \
  || ! grep -q "\"version\": \"$PLAYWRIGHT_VERSION\"" "$DRIVER_DIR/node_modules/playwright-core/package.json"; then
  step "npm install playwright-core@$PLAYWRIGHT_VERSION into $DRIVER_DIR"
  mkdir -p "$DRIVER_DIR"
  echo '{"private": true}' >"$DRIVER_DIR/package.json"
  (cd "$DRIVER_DIR" && npm install --no-save "playwright-core@$PLAYWRIGHT_VERSION" >&2) || exit 3
fi

TORCH_VENV="$CACHE/torch-only-venv"
TORCH_VERSION="2.13.0"
if [ ! -f "$TORCH_VENV/.complete" ]; then
  step "virtualenv with only torch==$TORCH_VERSION in $TORCH_VENV"
  rm -rf "$TORCH_VENV"
  python3 -m venv "$TORCH_VENV" >&2 || exit 3
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$TORCH_VENV/bin/pip" install -q "torch==$TORCH_VERSION" >&2 || exit 3
  touch "$TORCH_VENV/.complete"
fi

EXT="$ROOT/vscode-extension"
# pip for bundling fxls: the repository's venv when there is one (any Python 3 with pip works)
if [ -z "${FXLS_BUNDLE_PYTHON:-}" ] && [ -x "$ROOT/.venv/bin/python" ]; then
  export FXLS_BUNDLE_PYTHON="$ROOT/.venv/bin/python"
fi
if [ ! -d "$EXT/node_modules/vscode-languageclient" ] || [ "$EXT/package-lock.json" -nt "$EXT/node_modules/.package-lock.json" ]; then
  step "npm ci in vscode-extension"
  (cd "$EXT" && npm ci >&2)
fi
if [ ! -f "$EXT/fxls.vsix" ] || [ -n "$(cd "$EXT" && find src scripts package.json package-lock.json \
    tsconfig.json README.md LICENSE .vscodeignore ../fxls ../pyproject.toml -newer fxls.vsix \
    -not -name '*.pyc' 2>/dev/null | head -1)" ]; then
  step "building and packaging the extension"
  (cd "$EXT" && npm run --silent package >&2)
fi

step "done"
printf '{"code_server": "%s", "chromium": "%s", "node_modules": "%s", "vsix": "%s", "torch_python": "%s", "seconds": %d}\n' \
  "$CS_BIN" "$CHROMIUM" "$DRIVER_DIR/node_modules" "$EXT/fxls.vsix" "$TORCH_VENV/bin/python" "$SECONDS"
