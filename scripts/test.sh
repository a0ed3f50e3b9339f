#!/usr/bin/env bash
# The test command: installs what is missing (as root, through apt-get),
# then vets, lints (staticcheck, on a full run) and runs every test with the
# race detector.
#
#   bash scripts/test.sh            # everything
#   bash scripts/test.sh ./redis/   # one package (no lint)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { echo "test.sh: Go is not installed (https://go.dev/dl)" >&2; exit 1; }

bash scripts/deps.sh

# The module cache: every module of the root module's graph. The
# documentation tests build a newcomer's module offline (go mod tidy with
# GOPROXY=off), which needs modules that no build of this tree fetches; a
# fresh machine's cache holds only what builds fetched.
go mod download all

# The dashboard's browser test: Debian's chromium and playwright-core. As
# root they are installed and the test must run; otherwise it runs if they
# are there and is skipped (with a message) if not.
if [ "$(id -u)" = 0 ]; then
	bash scripts/browser-setup.sh
	export DLM_BROWSER_TEST=1
elif ! bash scripts/browser-setup.sh; then
	echo "test.sh: the dashboard's browser test will be skipped" >&2
fi

pkgs=("$@")
((${#pkgs[@]})) || pkgs=(./...)
go vet "${pkgs[@]}"
# staticcheck over both modules (scripts/lint.sh): on a full run only, as
# it always covers everything; it comes before the tests, to fail in seconds.
if ! (($#)); then
	bash scripts/lint.sh
fi
go test -race -count=1 -timeout 20m "${pkgs[@]}"

# The Python client (clients/python), against a dlm server built from
# this tree.
if ! (($#)); then
	bash scripts/pytest.sh
fi

# The comparison module (its own go.mod, so that dlm never depends on the
# other lock libraries): its adapters are tested on real servers.
if ! (($#)); then
	(cd bench && go vet ./... && go test -race -count=1 -timeout 10m ./...)
fi
