#!/usr/bin/env bash
# The Slurm figures of docs/performance.md, measured on a
# fresh loopback cluster (cluster.sh) with the daemon built in target/:
#   0. Gangway's added time to RUNNING over a plain sbatch on the same idle
#      cluster: PAIRS pairs (default 20), alternating which goes first, each
#      one-GPU job timed from the command's start until squeue shows it
#      RUNNING (the same poller for both), the cluster idle before each;
#      the ratio of the medians;
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

[limits]
queued_jobs_per_user = 100000
TOML
mkdir -p "$dir/work" && cd "$dir/work"

start_daemon() { # poll_ms; a fresh state each time
  sed -i "s/^poll_interval_ms = .*/poll_interval_ms = $1/" "$dir/gangway.toml"
  rm -rf "$dir/gangway"
  "$bin" serve --config "$dir/gangway.toml" 2>>"$dir/daemon.log" &
  daemon=$!
  for _ in $(seq 100); do "$bin" status >/dev/null 2>&1 && return; sleep 0.1; done
  echo "daemon did not start" >&2; exit 1
}
json() { "$bin" status --json; }

# 0. Gangway against a plain sbatch, alternating.
start_daemon 200
python3 - "$bin" "${PAIRS:-20}" <<'PY'
import statistics, subprocess, sys, time
gw, pairs = sys.argv[1], int(sys.argv[2])
def running(match):
    while True:
        out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%k"],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            jid, state, comment = (line.split("|", 2) + ["", ""])[:3]
            if state == "RUNNING" and match(jid, comment):
                return
        time.sleep(0.01)
def idle():
    while subprocess.run(["squeue", "-h", "-t", "running,completing"],
                         capture_output=True, text=True).stdout.strip():
        time.sleep(0.05)
def plain():
    t = time.time()
    jid = subprocess.run(["sbatch", "--parsable", "--gres=gpu:1", "-o", "/dev/null",
                          "--wrap", "sleep 1"], capture_output=True, text=True).stdout.strip()
    running(lambda i, c: i == jid)
    return time.time() - t
def gangway():
    t = time.time()
    out = subprocess.run([gw, "submit", "--gpus", "1", "--vc", "bench", "--", "sleep", "1"],
                         capture_output=True, text=True).stdout
    gid = out.split()[2]
    running(lambda i, c: c.startswith("gangway:") and c.split(":")[2] == gid)
    return time.time() - t
p, g = [], []
for n in range(pairs):
    for first in ([plain, gangway] if n % 2 == 0 else [gangway, plain]):
        idle()
        time.sleep(0.5)
        (p if first is plain else g).append(first())
mp, mg = statistics.median(p), statistics.median(g)
print(f"to RUNNING on an idle cluster, {pairs} pairs alternating: plain sbatch median {mp*1000:.0f} ms "
      f"({min(p)*1000:.0f}-{max(p)*1000:.0f}), through gangway-slurm median {mg*1000:.0f} ms "
      f"({min(g)*1000:.0f}-{max(g)*1000:.0f}); ratio {mg/mp:.2f}x "
      f"(median of pair ratios {statistics.median(b/a for a, b in zip(p, g)):.2f}x)")
PY
kill "$daemon"; wait "$daemon" 2>/dev/null || true; daemon=""

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
