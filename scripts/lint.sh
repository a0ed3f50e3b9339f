#!/usr/bin/env bash
# The linter: staticcheck, at the version pinned below, over both modules
# (the root one and bench/). It is run through `go run`, so nothing is
# installed and neither go.mod names it. Fails on any finding.
#
#   bash scripts/lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# To bump: change this line, run this script, fix what the new version finds.
STATICCHECK_VERSION=v0.8.2

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { echo "lint.sh: Go is not installed (https://go.dev/dl)" >&2; exit 1; }

staticcheck=honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION
status=0
for mod in . bench; do
	if ! (cd "$mod" && go run "$staticcheck" ./...); then
		echo "lint.sh: staticcheck $STATICCHECK_VERSION: findings in $mod/ (paths above are relative to it)" >&2
		status=1
	fi
done
exit "$status"
