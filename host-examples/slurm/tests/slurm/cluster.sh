#!/usr/bin/env bash
# A real Slurm cluster on this machine, for gangway-slurm's tests and demos:
# one munged, one slurmctld and N slurmd nodes (each with G fake GPUs), in
# two racks, every daemon on 127.0.0.1, everything under one folder.
#
#   cluster.sh start DIR [NODES] [GPUS]   # default 4 nodes x 8 GPUs
#   cluster.sh stop DIR
#   cluster.sh env DIR                    # prints: export SLURM_CONF=...
#   cluster.sh ctld-stop DIR              # stops slurmctld alone (a controller outage)
#   cluster.sh ctld-start DIR             # starts it again, recovering its saved jobs
#
# MIN_JOB_AGE (seconds, default 3600) is how long Slurm remembers an ended
# job: a test that restarts the daemon after Slurm forgot a job sets it low.
# CPUS (default 64) is each node's CPU count (8 per GPU: a job with -c 16
# and one GPU leaves a node's other GPUs usable).
# GPU_TYPES (default none: one type) gives the nodes GPU types in turn, each
# as a node feature: GPU_TYPES=a100:80,v100:32 makes n1, n3 a100 (80 GB) and
# n2, n4 v100 (32 GB), so each rack has both; gangway.toml gets [gpu_types].
# GRES_TYPED (with GPU_TYPES; default none) lists nodes (GRES_TYPED=n1,n2)
# whose type is given the way many sites give it instead: gres.conf names the
# product for all their GPUs (Type=a100 File=.../gpu[0-7], sinfo shows
# gpu:a100:8) and they have no type feature.
#
# Needs Debian's `munge slurmctld slurmd slurm-client` (Slurm 22.05). No
# systemd: the daemons are started directly and stopped by their pid files.
# Fake GPUs are character devices (mknod c 1 3, like /dev/null) listed one
# per line in gres.conf, each with its own Type (g0..g7), so a job can ask
# for exact GPU indices and Slurm sets CUDA_VISIBLE_DEVICES for it.
# Writes DIR/gangway.toml, a gangway-slurm config for this cluster.
#
# Partitions: gpu (the default), gpu2 (the same nodes: a daemon there is
# refused while one serves gpu, the lock covering the nodes), half (the
# first rack's nodes only: a daemon there places on them alone) and gw,
# which gangway-slurm's native mode manages: the project's
# job_submit.lua (host-examples/slurm/job_submit.lua, JobSubmitPlugins=lua)
# holds every job submitted there. Everything under DIR is readable by other
# users, so that unprivileged users can run Slurm's commands against it.
set -euo pipefail

die() { echo "cluster.sh: $*" >&2; exit 1; }

cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: cluster.sh start|stop|env DIR [NODES] [GPUS]"

stop() {
  local d="$1" pid f
  # Jobs first, so that no job step outlives its cluster.
  if [ -f "$d/etc/slurm.conf" ] && [ -f "$d/run/slurmctld.pid" ] \
      && kill -0 "$(cat "$d/run/slurmctld.pid")" 2>/dev/null; then
    # Every user's jobs (the tests run some as unprivileged users).
    SLURM_CONF="$d/etc/slurm.conf" timeout 10 squeue -h -o %A 2>/dev/null \
      | xargs -r env SLURM_CONF="$d/etc/slurm.conf" timeout 10 scancel 2>/dev/null || true
    for _ in $(seq 30); do
      [ -z "$(SLURM_CONF="$d/etc/slurm.conf" timeout 5 squeue -h -t running,completing 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for f in "$d"/run/slurmd-*.pid "$d"/run/slurmctld.pid "$d"/run/munged.pid; do
    [ -f "$f" ] || continue
    pid="$(cat "$f" 2>/dev/null || true)"
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  for _ in $(seq 50); do
    local alive=0
    for f in "$d"/run/*.pid; do
      [ -f "$f" ] || continue
      pid="$(cat "$f" 2>/dev/null || true)"
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then alive=1; fi
    done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for f in "$d"/run/*.pid; do
    [ -f "$f" ] || continue
    pid="$(cat "$f" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

ctld_stop() {
  local d="$1" pid
  pid="$(cat "$d/run/slurmctld.pid" 2>/dev/null || true)"
  [ -n "$pid" ] || die "no slurmctld pid in $d/run"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$d/run/slurmctld.pid"
}

ctld_start() {
  local d="$1"
  PATH="$PATH:/usr/sbin" slurmctld -f "$d/etc/slurm.conf" \
    || die "slurmctld did not start (see $d/log/slurmctld.log)"
  for _ in $(seq 200); do
    SLURM_CONF="$d/etc/slurm.conf" timeout 5 sinfo -h >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "slurmctld does not answer after 20 s (see $d/log/slurmctld.log)"
}

case "$cmd" in
  stop) stop "$dir"; exit 0 ;;
  env) echo "export SLURM_CONF=$(cd "$dir" && pwd)/etc/slurm.conf"; exit 0 ;;
  ctld-stop) ctld_stop "$dir"; exit 0 ;;
  ctld-start) ctld_start "$dir"; exit 0 ;;
  start) ;;
  *) die "unknown command $cmd (start, stop, env, ctld-stop or ctld-start)" ;;
esac

nodes="${3:-4}"
gpus="${4:-8}"
[ "$nodes" -ge 2 ] || die "need at least 2 nodes (two racks)"
[ "$gpus" -ge 1 ] && [ "$gpus" -le 64 ] || die "GPUs per node must be 1..64"
for b in munged slurmctld slurmd sinfo sbatch; do
  command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || die "$b not found (apt-get install munge slurmctld slurmd slurm-client)"
done
PATH="$PATH:/usr/sbin"

mkdir -p "$dir"
chmod 755 "$dir"
dir="$(cd "$dir" && pwd)"
stop "$dir"
# A fresh cluster every start: no jobs recovered from an earlier one.
rm -rf "$dir"/{state,spool,log,run}
mkdir -p "$dir"/{etc,run,log,state,spool,dev,munge}
chmod 700 "$dir/munge"
user="$(id -un)"
host="$(hostname -s)"

# Free ports: the controller and one per node, all on 127.0.0.1.
# Below the kernel's ephemeral range, so that no client socket (or one in
# TIME_WAIT) of an earlier cluster holds a port a daemon must bind; every
# socket in use is avoided, not only listening ones.
used="$( (ss -Htan 2>/dev/null || true) | awk '{print $4}' | sed 's/.*://' | sort -u)"
base=""
for _ in $(seq 200); do
  cand=$(( 10000 + (RANDOM % 220) * 100 ))
  ok=1
  for p in $(seq "$cand" $((cand + nodes + 1))); do
    if grep -qx "$p" <<<"$used"; then ok=0; break; fi
  done
  if [ "$ok" = 1 ]; then base="$cand"; break; fi
done
[ -n "$base" ] || die "no free port range found"
ctld_port="$base"
first_node_port=$((base + 1))
last_node_port=$((base + nodes))

# munge: its own key and socket in this folder.
head -c 1024 /dev/urandom > "$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"
munged --key-file="$dir/munge/munge.key" --socket="$dir/run/munge.sock" \
  --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
  --seed-file="$dir/munge/munged.seed" --num-threads=2 \
  || die "munged did not start (see $dir/log/munged.log)"

# Fake GPUs, typed one per index (g0..g7) on every node but those of
# GRES_TYPED (their lines are written with theirs, below).
IFS=',' read -r -a gpu_types <<<"${GPU_TYPES:-}"
gres_typed=",${GRES_TYPED:-},"
[ "$gres_typed" = ",," ] || [ "${#gpu_types[@]}" -gt 0 ] || die "GRES_TYPED needs GPU_TYPES"
per_index=""
for i in $(seq 1 "$nodes"); do
  [[ "$gres_typed" == *",n$i,"* ]] || per_index="${per_index:+$per_index,}n$i"
done
gres=""
: > "$dir/etc/gres.conf"
for i in $(seq 0 $((gpus - 1))); do
  [ -e "$dir/dev/gpu$i" ] || mknod "$dir/dev/gpu$i" c 1 3
  [ -z "$per_index" ] || echo "NodeName=$per_index Name=gpu Type=g$i File=$dir/dev/gpu$i" >> "$dir/etc/gres.conf"
  gres="${gres:+$gres,}gpu:g$i:1"
done

# The nodes: one line for all, or one per node with its GPU type feature
# (or, for GRES_TYPED, its type in its GRES).
node_spec="NodeHostname=$host NodeAddr=127.0.0.1 CPUs=${CPUS:-64} RealMemory=1000 State=UNKNOWN"
types_toml=""
if [ "${#gpu_types[@]}" = 0 ]; then
  node_lines="NodeName=n[1-$nodes] Port=[$first_node_port-$last_node_port] Gres=$gres $node_spec"
else
  node_lines=""
  for i in $(seq 1 "$nodes"); do
    t="${gpu_types[$(( (i - 1) % ${#gpu_types[@]} ))]}"
    t="${t%%:*}"
    if [[ "$gres_typed" == *",n$i,"* ]]; then
      echo "NodeName=n$i Name=gpu Type=$t File=$dir/dev/gpu[0-$((gpus - 1))]" >> "$dir/etc/gres.conf"
      typed="Gres=gpu:$t:$gpus"
    else
      typed="Features=$t Gres=$gres"
    fi
    node_lines="${node_lines:+$node_lines
}NodeName=n$i Port=$((base + i)) $typed $node_spec"
  done
  types_toml="[gpu_types]"
  for t in "${gpu_types[@]}"; do
    [[ "$t" =~ ^[a-z0-9]+:[0-9]+$ ]] || die "GPU_TYPES: $t is not NAME:GB"
    types_toml="$types_toml
${t%%:*} = ${t##*:}"
  done
fi

half=$(( nodes / 2 ))
cat > "$dir/etc/topology.conf" <<TOPO
SwitchName=rack1 Nodes=n[1-$half]
SwitchName=rack2 Nodes=n[$((half + 1))-$nodes]
SwitchName=top Switches=rack[1-2]
TOPO

cat > "$dir/etc/slurm.conf" <<CONF
ClusterName=gangway
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/run/munge.sock
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
TopologyPlugin=topology/tree
MpiDefault=none
MailProg=/bin/true
ReturnToService=1
SlurmdParameters=config_overrides
SchedulerParameters=bf_interval=1,batch_sched_delay=0
MinJobAge=${MIN_JOB_AGE:-3600}
KillWait=2
$node_lines
JobSubmitPlugins=lua
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu2 Nodes=ALL MaxTime=INFINITE State=UP
PartitionName=gw Nodes=ALL MaxTime=INFINITE State=UP
PartitionName=half Nodes=n[1-$half] MaxTime=INFINITE State=UP
CONF
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sed 's/^local GANGWAY_PARTITION = .*/local GANGWAY_PARTITION = "gw"/' \
  "$here/../../job_submit.lua" > "$dir/etc/job_submit.lua"

cat > "$dir/gangway.toml" <<TOML
# gangway-slurm for the test cluster in $dir.
# SINGLE-USER: [access] socket is "owner" (the default), so only the daemon's
# own user ($user) can reach it, and every job runs as $user. For a cluster
# users share, add
#   [access]
#   socket = "everyone"        # or "group" with socket_group = "..."
# and run the daemon as root (host-examples/slurm/README.md, "Trust model").
state_dir = "$dir/gangway"
preset = "philly"
poll_interval_ms = 200
launch_timeout_s = 30

[slurm]
conf = "$dir/etc/slurm.conf"
topology_conf = "$dir/etc/topology.conf"

$types_toml

[[vc]]
name = "research"
quota_gpus = 20

[[vc]]
name = "prod"
quota_gpus = 24
TOML

export SLURM_CONF="$dir/etc/slurm.conf"
slurmctld -c -f "$SLURM_CONF" || die "slurmctld did not start (see $dir/log/slurmctld.log)"
for i in $(seq 1 "$nodes"); do
  mkdir -p "$dir/spool/n$i"
  slurmd -f "$SLURM_CONF" -N "n$i" || die "slurmd n$i did not start (see $dir/log/slurmd-n$i.log)"
done

for _ in $(seq 200); do
  states="$(sinfo -h -N -p gpu -o '%T' 2>/dev/null || true)"
  idle="$(grep -c '^idle$' <<<"$states" || true)"
  [ "$idle" = "$nodes" ] && break
  sleep 0.1
done
[ "$idle" = "$nodes" ] || die "nodes not idle after 20 s: $(echo $states) (see $dir/log)"
echo "cluster up: $nodes nodes x $gpus GPUs, controller 127.0.0.1:$ctld_port, nodes 127.0.0.1:$first_node_port-$last_node_port"
echo "export SLURM_CONF=$SLURM_CONF"
