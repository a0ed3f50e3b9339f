#!/usr/bin/env bash
# The comparison benchmarks: dlm's stores beside go-redsync/redsync,
# bsm/redislock, etcd's concurrency.Mutex and PostgreSQL advisory locks, in
# one run on the same servers. Installs the servers if missing (as root),
# starts each on free loopback ports, stops them at the end, and writes
# BENCHMARKS.md. Flags go to the bench command (cd bench && go run . -h):
#
#   bash scripts/bench.sh                         # every target, 3s per workload
#   bash scripts/bench.sh -duration 10s
#   bash scripts/bench.sh -only dlm-server-1,pg-advisory -out /dev/stdout
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
bash scripts/deps.sh

out=(-out ../BENCHMARKS.md)
for a in "$@"; do
	case "$a" in -out | -out=* | --out | --out=*) out=() ;; esac
done
cd bench
exec go run . "${out[@]}" "$@"
