#!/usr/bin/env bash
# Installs what the browser test (cmd/dlm's TestDashboardInBrowser) needs:
# Debian's chromium (/usr/bin/chromium), Node.js and npm if missing, and the
# node modules of test/browser (npm ci, from its package-lock.json). As root,
# through apt-get. Idempotent: it prints nothing when all is present.
#
#   bash scripts/browser-setup.sh
#   DLM_BROWSER_TEST=1 go test -run Dashboard ./cmd/dlm/   # fails, not skips, if anything is missing
set -euo pipefail
cd "$(dirname "$0")/../test/browser"

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "browser-setup.sh: installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	else
		echo "browser-setup.sh: missing ${missing[*]}; install with: sudo apt-get install ${missing[*]}" >&2
		exit 1
	fi
fi

# playwright-core wants a recent Node.js (see its "engines" in package-lock.json).
need=$(node -p "(require('./package-lock.json').packages['node_modules/playwright-core'].engines || {}).node || ''")
major=$(node -p 'process.versions.node.split(".")[0]')
if [[ $need =~ ^\>=([0-9]+) ]] && ((major < BASH_REMATCH[1])); then
	echo "browser-setup.sh: Node.js $(node --version) is older than playwright-core needs ($need)" >&2
	exit 1
fi

# The locked playwright-core, unless it is there already.
want=$(node -p "require('./package-lock.json').packages['node_modules/playwright-core'].version")
have=$(node -p "require('./node_modules/playwright-core/package.json').version" 2>/dev/null || true)
if [ "$want" != "$have" ]; then
	echo "browser-setup.sh: npm ci in test/browser (playwright-core $want)"
	npm ci --no-audit --no-fund --loglevel=error >/dev/null
fi
