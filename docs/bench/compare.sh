#!/usr/bin/env bash
# Measures Strata against franz-go's in-memory kfake with the same
# `strata loadtest` runs, alternating the two brokers within each round so
# both see the same machine noise, and prints medians and Strata/kfake
# ratios as a Markdown table (docs/benchmarks.md).
#
#   bash docs/bench/compare.sh            # 5 rounds (ROUNDS=... to change)
#
# Needs Go and python3. Both brokers run as separate processes on loopback;
# Strata writes to a fresh data directory on the local disk.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

ROUNDS="${ROUNDS:-5}"
RECORDS="${RECORDS:-300000}"   # 1 KiB each: ~300 MiB per throughput run
LATENCY_SECS="${LATENCY_SECS:-10s}"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

go build -o "$work/strata" ./cmd/strata
bin="$work/strata"

start() { # name, command...: runs it and waits for its bootstrap line
	local name=$1; shift
	"$@" >"$work/$name.out" 2>"$work/$name.err" &
	for _ in $(seq 100); do
		addr=$(grep -o 'bootstrap [^ ]*' "$work/$name.out" 2>/dev/null | awk '{print $2}') || true
		[ -n "${addr:-}" ] && { echo "$addr"; return; }
		sleep 0.1
	done
	echo "$name did not start" >&2; cat "$work/$name.err" >&2; exit 1
}
strata=$(start strata "$bin" dev --data-dir "$work/data" --listen 127.0.0.1:0 --http-listen off)
kfake=$(start kfake "$bin" loadtest kfake)
echo "strata at $strata, kfake at $kfake; $ROUNDS rounds" >&2

results="$work/results.jsonl"
run() { # target addr label args...
	local target=$1 addr=$2 label=$3; shift 3
	"$bin" loadtest "$@" --bootstrap "$addr" --json 2>/dev/null |
		python3 -c "import json,sys; d=json.load(sys.stdin); d['target']='$target'; d['label']='$label'; print(json.dumps(d))" >>"$results"
}
for round in $(seq "$ROUNDS"); do
	for t in strata kfake; do
		addr=${!t}
		topic="bench-$round"
		run "$t" "$addr" produce produce --topic "$topic" --create --partitions 6 --records "$RECORDS" --size 1024 --acks all
		run "$t" "$addr" consume consume --topic "$topic" --records "$RECORDS" --from earliest
		for mb in 10 50; do
			run "$t" "$addr" "latency@${mb}MiB/s" produce --topic "lat-$round-$mb" --create --partitions 6 \
				--duration "$LATENCY_SECS" --size 1024 --acks all --rate-mb "$mb"
		done
	done
	echo "round $round done" >&2
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(target, label, f):
    return statistics.median(f(r) for r in rows if r["target"] == target and r["label"] == label)
print("| measure | Strata | kfake | Strata/kfake |")
print("|---|---:|---:|---:|")
for label in ["produce", "consume"]:
    s, k = med("strata", label, lambda r: r["mb_per_sec"]), med("kfake", label, lambda r: r["mb_per_sec"])
    print(f"| {label} throughput, MiB/s | {s:.0f} | {k:.0f} | {s/k:.2f} |")
for label in ["latency@10MiB/s", "latency@50MiB/s"]:
    for p in ["p50", "p99", "p99_9"]:
        s, k = med("strata", label, lambda r: r["latency_ms"][p]), med("kfake", label, lambda r: r["latency_ms"][p])
        print(f"| produce {p} at {label.split('@')[1]}, ms | {s:.2f} | {k:.2f} | {s/k:.2f} |")
PY
