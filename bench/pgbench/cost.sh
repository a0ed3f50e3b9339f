#!/usr/bin/env bash
# PostgreSQL's CPU per lock cycle for each pgbench script of this directory:
# the postmaster and its backends, user and system time from /proc (a
# backend that exited is counted in the postmaster's children times), over
# a fixed number of cycles, so the figure holds whatever the machine's speed.
#
#   bash bench/pgbench/cost.sh DATADIR PORT [CLIENTS] [CYCLES] [ROUNDS]
#
# DATADIR is the running server's data directory (for postmaster.pid), PORT
# its port on 127.0.0.1, user postgres, database postgres. CLIENTS (64)
# connections run CYCLES (192000) cycles in all, per script and round
# (ROUNDS, 3), the scripts interleaved. It creates the sequences the
# scripts use. Run it as a user that may read the server's /proc entries.
set -euo pipefail

data=${1:?usage: cost.sh DATADIR PORT [CLIENTS] [CYCLES] [ROUNDS]}
port=${2:?usage: cost.sh DATADIR PORT [CLIENTS] [CYCLES] [ROUNDS]}
clients=${3:-64}
cycles=${4:-192000}
rounds=${5:-3}
dir=$(cd "$(dirname "$0")" && pwd)
bin=$(dirname "$(command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench | tail -1)")
conn=(-h 127.0.0.1 -p "$port" -U postgres)
tick=$(getconf CLK_TCK)

"$bin/psql" -q -v ON_ERROR_STOP=1 "${conn[@]}" -d postgres -c \
	"CREATE SEQUENCE IF NOT EXISTS dlm_bench_token; CREATE UNLOGGED SEQUENCE IF NOT EXISTS dlm_bench_token_unlogged;
	 $(for i in $(seq 0 15); do printf 'CREATE SEQUENCE IF NOT EXISTS dlm_bench_token_%d; ' "$i"; done)"

# ticks prints the CPU ticks of the postmaster and its live children.
ticks() {
	local pm t f
	pm=$(head -1 "$data/postmaster.pid")
	read -r -a f <"/proc/$pm/stat"
	t=$((f[13] + f[14] + f[15] + f[16]))
	for c in $(pgrep -P "$pm"); do
		read -r -a f <"/proc/$c/stat" 2>/dev/null || continue
		t=$((t + f[13] + f[14]))
	done
	echo "$t"
}

declare -A results
scripts=(plain token token-unlogged token-sharded dlm)
for ((r = 0; r < rounds; r++)); do
	for s in "${scripts[@]}"; do
		before=$(ticks)
		"$bin/pgbench" "${conn[@]}" -n -M prepared -c "$clients" -j 2 -t $((cycles / clients)) \
			-f "$dir/$s.sql" postgres >/dev/null
		sleep 0.5 # the backends exit and are reaped
		after=$(ticks)
		results[$s]+=" $(((after - before) * 1000000 / tick / cycles))"
	done
done
echo "PostgreSQL CPU per cycle (µs), $clients clients, $cycles cycles, each round:"
for s in "${scripts[@]}"; do
	printf '  %-15s%s\n' "$s" "${results[$s]}"
done
