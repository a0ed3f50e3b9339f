#!/usr/bin/env bash
# The comparison benchmarks: dlm's stores beside go-redsync/redsync,
# bsm/redislock, etcd's concurrency.Mutex and PostgreSQL advisory locks, in
# one run on the same servers. Installs the servers if missing (as root),
# starts each on free loopback ports, stops them at the end, and writes
# BENCHMARKS.md. Flags go to the bench command (cd bench && go run . -h):
#
#   bash scripts/bench.sh                         # every target, 3 interleaved rounds of 3s per workload (medians)
#   bash scripts/bench.sh -duration 10s
#   bash scripts/bench.sh -only dlm-server-1,pg-advisory -out /dev/stdout
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
bash scripts/deps.sh

# The Python client's cycle beside redis-py needs redis-py: a virtual
# environment with it (pinned), made once; without it that table is left out.
py=()
if command -v python3 >/dev/null 2>&1; then
	venv="${DLM_BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/dlm/bench-venv}"
	if ! "$venv/bin/python" -c 'import redis; redis.Redis' 2>/dev/null; then
		python3 -m venv "$venv" && "$venv/bin/pip" install -q 'redis==8.1.0' ||
			echo "bench.sh: redis-py could not be installed; the Python cycle is left out" >&2
	fi
	if "$venv/bin/python" -c 'import redis; redis.Redis' 2>/dev/null; then
		py=(-python "$venv/bin/python")
	fi
fi

out=(-out ../BENCHMARKS.md)
for a in "$@"; do
	case "$a" in -out | -out=* | --out | --out=*) out=() ;; esac
done
cd bench
exec go run . "${out[@]}" "${py[@]}" -rounds 5 -failover 3 "$@"
