#!/usr/bin/env bash
# Runs a command while CPU-bound processes keep the machine busy, to check
# that the suite judges safety and ordering, not the scheduler. The busy
# loops stop when the command ends (or after an hour at the most).
#
#   bash scripts/busy.sh -- bash scripts/test.sh
#   bash scripts/busy.sh -n 2 -- go test -race -count=5 -run TestChaos ./internal/chaos/
#   bash scripts/busy.sh -r 3 -- bash scripts/test.sh     # three runs in a row, timed
#
# -n N  busy processes (default 2, one per core of the 2-core CI machine)
# -r N  run the command N times in a row under the same load (default 1);
#       stops at the first failure
set -euo pipefail

n=2
runs=1
while (($#)); do
	case "$1" in
	-n) n="$2"; shift 2 ;;
	-r) runs="$2"; shift 2 ;;
	--) shift; break ;;
	*) break ;;
	esac
done
(($#)) || { echo "usage: $0 [-n N] [-r N] -- command [args...]" >&2; exit 2; }

pids=()
stop() {
	((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
}
trap stop EXIT
for ((i = 0; i < n; i++)); do
	timeout 1h sh -c 'while :; do :; done' &
	pids+=($!)
done
echo "busy.sh: $n busy processes (${pids[*]})" >&2

for ((r = 1; r <= runs; r++)); do
	start=$(date +%s)
	status=0
	"$@" || status=$?
	echo "busy.sh: run $r of $runs: exit $status in $(($(date +%s) - start)) s under $n busy processes" >&2
	((status == 0)) || exit "$status"
done
