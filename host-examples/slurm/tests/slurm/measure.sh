#!/usr/bin/env bash
# The Slurm figures of docs/performance.md, measured on a
# fresh loopback cluster (cluster.sh) with the daemon built in target/:
#   1. submit to RUNNING through the daemon on an idle cluster (median of 20
#      one-GPU jobs submitted one after another);
#   2. cycles and rounds per second with 1,000 pending jobs (poll interval 0:
#      the daemon cycles as fast as it can; each cycle reads sinfo and squeue,
#      reconciles and runs one round);
#   3. the daemon's resident memory after that.
# Usage: measure.sh [DIR] [BIN]   (defaults: a temp folder, target/release or debug)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
dir="${1:-$(mktemp -d /tmp/gangway-slurm-measure.XXXXXX)}"
bin="${2:-}"
if [ -z "$bin" ]; then
  for b in "$root/target/release/gangway-slurm" "$root/target/debug/gangway-slurm"; do
    [ -x "$b" ] && bin="$b" && break
  done
fi
[ -x "$bin" ] || { echo "build gangway-slurm first (cargo build -p gangway-slurm --bin gangway-slurm)" >&2; exit 1; }
daemon=""
cleanup() { [ -n "$daemon" ] && kill "$daemon" 2>/dev/null; bash "$here/cluster.sh" stop "$dir"; }
trap cleanup EXIT
bash "$here/cluster.sh" start "$dir" 4 8 >/dev/null
rm -rf "$dir/gangway" "$dir/daemon.log"
export SLURM_CONF="$dir/etc/slurm.conf" GANGWAY_SLURM_STATE="$dir/gangway"
cat >> "$dir/gangway.toml" <<TOML

[[vc]]
name = "bench"
TOML
mkdir -p "$dir/work" && cd "$dir/work"

start_daemon() { # poll_ms
  sed -i "s/^poll_interval_ms = .*/poll_interval_ms = $1/" "$dir/gangway.toml"
  "$bin" serve --config "$dir/gangway.toml" 2>>"$dir/daemon.log" &
  daemon=$!
  for _ in $(seq 100); do "$bin" status >/dev/null 2>&1 && return; sleep 0.1; done
  echo "daemon did not start" >&2; exit 1
}
json() { "$bin" status --json; }

# 1. Submit to RUNNING on an idle cluster.
start_daemon 100
for i in $(seq 20); do
  id=$("$bin" submit --gpus 1 --vc bench -- sleep 0.5 | awk '{print $3}')
  for _ in $(seq 400); do
    st=$("$bin" why "$id" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["first_running_ms"] is not None)')
    [ "$st" = True ] && break
    sleep 0.02
  done
done
sleep 1.5
json | python3 -c '
import json, sys, statistics
r = json.load(sys.stdin)
d = sorted(j["first_running_ms"] - j["submitted_ms"] for j in r["finished"] if j["first_running_ms"])
print(f"submit to RUNNING, idle cluster: median {statistics.median(d):.0f} ms, min {d[0]} ms, max {d[-1]} ms over {len(d)} jobs")'
kill "$daemon"; wait "$daemon" 2>/dev/null || true; daemon=""

# 2. 1,000 pending jobs behind a job holding the whole cluster.
start_daemon 0
"$bin" submit --gpus 32 --vc bench -- sleep 600 >/dev/null
sleep 2
for i in $(seq 1000); do "$bin" submit --gpus $(( (i % 4) + 1 )) --vc bench -- true >/dev/null; done
sleep 2
json > "$dir/a.json"; sleep 10; json > "$dir/b.json"
python3 - "$dir/a.json" "$dir/b.json" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sa, sb = a["stats"], b["stats"]
dt = sb["uptime_s"] - sa["uptime_s"] or 1
cyc = sb["cycles"] - sa["cycles"]; rnd = sb["rounds"] - sa["rounds"]
rus = (sb["round_us"] - sa["round_us"]) / max(rnd, 1)
cus = (sb["cycle_us"] - sa["cycle_us"]) / max(cyc, 1)
sus = (sb["slurm_read_us"] - sa["slurm_read_us"]) / max(cyc, 1)
print(f"with {len(b['pending'])} pending jobs: {cyc/dt:.1f} cycles/s and {rnd/dt:.1f} rounds/s sustained "
      f"(cycle {cus/1000:.1f} ms, of which sinfo+squeue {sus/1000:.1f} ms; Scheduler::round {rus:.0f} us, i.e. {1e6/rus:.0f} rounds/s of pure scheduling)")
print(f"daemon resident memory: {sb['rss_kib']} KiB after {sb['cycles']} cycles")
PY
