#!/usr/bin/env bash
# Fuzzes every decoder fed by the network or the disk, one target after the
# other, for FUZZTIME each (default 10s). `go test` runs the same targets on
# their seed corpora only; an input that fails here is written to the
# package's testdata/fuzz/<target>/, where it stays as a regression seed
# once the bug is fixed.
#
#   bash scripts/fuzz.sh                        # every target, 10s each
#   FUZZTIME=1m bash scripts/fuzz.sh            # a minute each
#   bash scripts/fuzz.sh FuzzFSMApply FuzzParse # only the targets named
#
# FUZZPARALLEL sets the number of fuzzing processes (default: one per CPU);
# FUZZMINIMIZETIME how long each new input is minimized (default 100x, a
# hundred runs: go's default of a minute leaves short runs no time to fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi

fuzztime=${FUZZTIME:-10s}
minimize=${FUZZMINIMIZETIME:-100x}

# package, target, and its own -fuzzminimizetime if it needs one.
targets=(
	"./locktable/ FuzzTable"         # lock table operations, checked against a shadow table
	"./locktable/ FuzzRestore"       # lock table snapshots
	"./driver/ FuzzParseMode"        # mode names
	"./server/fsm/ FuzzFSMApply"     # Raft log entries
	"./server/fsm/ FuzzFSMRestore"   # Raft snapshots
	"./server/protocol/ FuzzRequestCommand" # client requests, into commands
	"./server/ FuzzSessionStream 0"  # client requests on a running server's session stream
	"./server/protocol/ FuzzUTF8Codec"     # client messages with invalid UTF-8, repaired and refused per request
	"./server/raftnode/ FuzzParsePeers" # dlm server -peers
	"./storeurl/ FuzzParse"          # store URLs
	"./storeurl/ FuzzParseSecret"    # store URLs with a password: never shown
	"./dlmserver/ FuzzParseAddrs"       # the dlm store's server addresses
	"./dlmserver/ FuzzLeaderHint"       # the leader a server names
	"./internal/redislua/ FuzzNameOf"        # Redis keys found by SCAN
	"./internal/redislua/ FuzzParseResource" # Redis replies to the listing script
	"./cmd/dlm/ FuzzSettings"        # dlm's other flags and environment
)
# FuzzSessionStream's coverage varies with the server's goroutines: minimizing
# its inputs would chase noise.

# Every fuzz target of the repository must be listed above.
listed=" ${targets[*]} "
while IFS=: read -r file fn; do
	pkg="./$(dirname "$file")/"
	name=${fn#func }
	name=${name%%(*}
	if [[ $listed != *" $pkg $name "* ]]; then
		echo "fuzz.sh: $name in $pkg is not in the list of targets" >&2
		exit 1
	fi
done < <(grep -r --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*(' . | sed 's|^\./||')

wanted=" $* "
ran=0
failed=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
	read -r pkg name own <<<"$t"
	if (($#)) && [[ $wanted != *" $name "* ]]; then
		continue
	fi
	args=(-run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "${own:-$minimize}")
	if [ -n "${FUZZPARALLEL:-}" ]; then
		args+=(-parallel "$FUZZPARALLEL")
	fi
	echo "fuzz.sh: $name ($pkg) for $fuzztime"
	corpus="$pkg/testdata/fuzz/$name"
	before=$(ls "$corpus" 2>/dev/null || true)
	ran=$((ran + 1))
	if go test "${args[@]}" "$pkg" 2>&1 | tee "$log"; then
		continue
	fi
	# Go's fuzz coordinator can fail a run that found nothing when the
	# fuzz time ends (go.dev/issue/75804, fixed in Go 1.27): no input
	# written, only "context deadline exceeded".
	if [[ $(ls "$corpus" 2>/dev/null || true) == "$before" ]] && grep -q '^    context deadline exceeded$' "$log"; then
		echo "fuzz.sh: $name: the fuzz time ran out in Go's coordinator (go.dev/issue/75804); no failing input" >&2
		continue
	fi
	failed+=("$name")
done
if ((ran == 0)); then
	echo "fuzz.sh: no target named $*" >&2
	exit 2
fi
if ((${#failed[@]})); then
	echo "fuzz.sh: failed: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz.sh: $ran targets, no failure"
