#!/usr/bin/env bash
# Installs the servers that the tests and benchmarks start (redis-server,
# etcd, PostgreSQL), and curl, through apt-get when run as root; otherwise says what
# is missing and fails.
set -euo pipefail

# Debian packages of the servers the tests start.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
if ! command -v initdb >/dev/null 2>&1 && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
	missing+=(postgresql)
fi
# curl: the JSON API's tests talk to it as a shell script would.
command -v curl >/dev/null 2>&1 || missing+=(curl)
if ((${#missing[@]})); then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "deps.sh: installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	else
		echo "deps.sh: missing ${missing[*]}; install with: sudo apt-get install ${missing[*]}" >&2
		exit 1
	fi
fi

