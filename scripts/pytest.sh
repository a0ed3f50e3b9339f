#!/usr/bin/env bash
# The Python client's tests (clients/python/tests), against a dlm server
# built from this tree: builds the binary into a temporary directory,
# installs pytest if it is missing, and runs the tests. Extra arguments go
# to pytest.
#
#   bash scripts/pytest.sh
#   bash scripts/pytest.sh -k json_api
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { echo "pytest.sh: Go is not installed (https://go.dev/dl)" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "pytest.sh: python3 is not installed" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/dlm" ./cmd/dlm
export DLM_BIN="$tmp/dlm"

if ! python3 -c 'import pytest' >/dev/null 2>&1; then
	python3 -m pip install --quiet pytest
fi

python3 -m pytest -q -p no:cacheprovider clients/python/tests "$@"
