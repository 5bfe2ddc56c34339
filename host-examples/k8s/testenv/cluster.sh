#!/usr/bin/env bash
# A real Kubernetes control plane on this machine, for gangway-k8s's tests,
# benchmarks and demos: etcd, kube-apiserver and KWOK (fake nodes and pod
# lifecycles), every listener on 127.0.0.1, everything under one folder.
# No kubelet, no controller-manager, no container runtime.
#
#   cluster.sh start DIR     # starts etcd, kube-apiserver, kwok; prints DIR/env
#   cluster.sh stop DIR      # stops them (SIGTERM, then SIGKILL)
#   cluster.sh kwok-stop DIR / kwok-start DIR
#   cluster.sh kill DIR NAME      # SIGKILLs etcd, kube-apiserver or kwok (a crash)
#   cluster.sh restart DIR NAME   # starts it again on the same ports and data
#   cluster.sh signal DIR NAME SIG  # e.g. STOP / CONT: a process that hangs
#
# Binaries come from $GANGWAY_K8S_BIN (build.sh prints it; built from this
# folder's go.mod). Ports are free ones picked at start; DIR/env has them:
#   GANGWAY_K8S_APISERVER=https://127.0.0.1:PORT
#   GANGWAY_K8S_ADMIN_KUBECONFIG=DIR/admin.kubeconfig  (system:masters)
#   GANGWAY_K8S_SCHEDULER_KUBECONFIG=DIR/scheduler.kubeconfig
#     (user system:serviceaccount:gangway-system:gangway-scheduler: what the
#     crate's manifests/rbac.yaml grants it and nothing more)
#   GANGWAY_K8S_KUBE_SCHEDULER_KUBECONFIG=DIR/kube-scheduler.kubeconfig
#     (user system:kube-scheduler, the bootstrap role of kube-scheduler)
#
# Authentication: bearer tokens from a static token file; authorization:
# RBAC only. Serving certificate: a CA made here with openssl signs a
# certificate for 127.0.0.1, and every kubeconfig trusts that CA.
# Two admission plugins are off, both for want of a controller-manager:
# ServiceAccount (nothing creates service accounts, so pods name none) and
# TaintNodesByCondition (it taints every new node not-ready:NoSchedule, and
# only the node lifecycle controller would lift the taint).
#
# KWOK plays the kubelets of every node, with the Stage documents of
# stages.yaml (KWOK has none built in): a node becomes Ready (unless it is
# labelled gangway.test/not-ready=true, which makes it NotReady); a bound pod
# becomes Running; a running pod with the annotation
# gangway.test/duration (a Go duration, e.g. 30s) succeeds after it; a
# deleted pod is removed at once.
set -euo pipefail

die() { echo "cluster.sh: $*" >&2; exit 1; }

cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: cluster.sh start|stop|kwok-start|kwok-stop DIR"
here="$(cd "$(dirname "$0")" && pwd)"

stop_pid() {
  local f="$1" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f" 2>/dev/null || true)"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
  local port="$1" what="$2" pidfile="$3"
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$(cat "$pidfile")" 2>/dev/null || die "$what exited; see $dir/log/$what.log"
    sleep 0.1
  done
  die "$what did not listen on 127.0.0.1:$port within 30 s; see $dir/log/$what.log"
}

kubeconfig() {
  local file="$1" user="$2" token="$3" port="$4"
  cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gangway-test
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $dir/pki/ca.crt
users:
- name: $user
  user:
    token: $token
contexts:
- name: gangway-test
  context:
    cluster: gangway-test
    user: $user
current-context: gangway-test
EOF
  chmod 600 "$file"
}

start_kwok() {
  # shellcheck disable=SC1091
  . "$dir/env"
  "$GANGWAY_K8S_BIN/kwok" \
    --kubeconfig="$dir/admin.kubeconfig" \
    --config="$here/stages.yaml" \
    --manage-all-nodes=true \
    --node-lease-duration-seconds=0 \
    --cidr=127.64.0.0/10 \
    --node-ip=127.0.0.1 \
    >"$dir/log/kwok.log" 2>&1 &
  echo $! > "$dir/run/kwok.pid"
}

start_etcd() {
  # shellcheck disable=SC1091
  . "$dir/run/ports"
  "$GANGWAY_K8S_BIN/etcd" \
    --name=gangway-test \
    --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" \
    --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="gangway-test=http://127.0.0.1:$peer_port" \
    --quota-backend-bytes=8589934592 \
    --unsafe-no-fsync=true \
    --log-level=warn \
    >>"$dir/log/etcd.log" 2>&1 &
  echo $! > "$dir/run/etcd.pid"
  wait_port "$etcd_port" etcd "$dir/run/etcd.pid"
}

start_apiserver() {
  # shellcheck disable=SC1091
  . "$dir/run/ports"
  local pki="$dir/pki"
  "$GANGWAY_K8S_BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$api_port" \
    --tls-cert-file="$pki/apiserver.crt" \
    --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --token-auth-file="$pki/tokens.csv" \
    --authorization-mode=RBAC \
    --anonymous-auth=false \
    --service-account-issuer=https://127.0.0.1 \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
    --max-requests-inflight=1000 \
    --max-mutating-requests-inflight=500 \
    --endpoint-reconciler-type=none \
    --profiling=false \
    >>"$dir/log/kube-apiserver.log" 2>&1 &
  echo $! > "$dir/run/kube-apiserver.pid"
  wait_port "$api_port" kube-apiserver "$dir/run/kube-apiserver.pid"
}

# SIGKILL, as a crash: no chance to clean up.
kill_now() {
  local f="$dir/run/$1.pid" pid
  [ -f "$f" ] || die "$1 is not running (no $f)"
  pid="$(cat "$f")"
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$f"
}

# A component started again as `start` started it, on the same ports.
restart() {
  GANGWAY_K8S_BIN="$(grep '^GANGWAY_K8S_BIN=' "$dir/env" | cut -d= -f2-)"
  case "$1" in
    etcd) start_etcd ;;
    kube-apiserver) start_apiserver ;;
    kwok) start_kwok ;;
    *) die "cannot restart $1 (etcd, kube-apiserver or kwok)" ;;
  esac
}

start() {
  local bin="${GANGWAY_K8S_BIN:-}"
  [ -n "$bin" ] || die "GANGWAY_K8S_BIN is not set (run build.sh)"
  local p
  for p in etcd kube-apiserver kwok; do
    [ -x "$bin/$p" ] || die "$bin/$p is missing (run build.sh)"
  done
  command -v openssl >/dev/null || die "openssl is needed for the certificates"
  mkdir -p "$dir"/{run,log,pki,etcd}
  dir="$(cd "$dir" && pwd)"

  # Certificates: a CA, the apiserver's serving certificate for 127.0.0.1,
  # and the service-account signing key.
  local pki="$dir/pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=gangway-test-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > "$pki/san.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 30 -extfile "$pki/san.ext" -out "$pki/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

  # Tokens: random, one per identity, in the apiserver's static token file.
  local admin_token sched_token ks_token kwok_token
  admin_token="$(openssl rand -hex 24)"
  sched_token="$(openssl rand -hex 24)"
  ks_token="$(openssl rand -hex 24)"
  {
    echo "$admin_token,gangway-test-admin,admin,\"system:masters\""
    echo "$sched_token,system:serviceaccount:gangway-system:gangway-scheduler,gangway-scheduler,\"system:serviceaccounts,system:serviceaccounts:gangway-system\""
    echo "$ks_token,system:kube-scheduler,kube-scheduler"
  } > "$pki/tokens.csv"
  chmod 600 "$pki/tokens.csv"

  local etcd_port peer_port api_port
  etcd_port="$(free_port)"; peer_port="$(free_port)"; api_port="$(free_port)"

  cat > "$dir/run/ports" <<EOF
etcd_port=$etcd_port
peer_port=$peer_port
api_port=$api_port
EOF
  GANGWAY_K8S_BIN="$bin" start_etcd
  GANGWAY_K8S_BIN="$bin" start_apiserver

  kubeconfig "$dir/admin.kubeconfig" gangway-test-admin "$admin_token" "$api_port"
  kubeconfig "$dir/scheduler.kubeconfig" gangway-scheduler "$sched_token" "$api_port"
  kubeconfig "$dir/kube-scheduler.kubeconfig" kube-scheduler "$ks_token" "$api_port"
  cat > "$dir/env" <<EOF
GANGWAY_K8S_BIN=$bin
GANGWAY_K8S_APISERVER=https://127.0.0.1:$api_port
GANGWAY_K8S_ADMIN_KUBECONFIG=$dir/admin.kubeconfig
GANGWAY_K8S_SCHEDULER_KUBECONFIG=$dir/scheduler.kubeconfig
GANGWAY_K8S_KUBE_SCHEDULER_KUBECONFIG=$dir/kube-scheduler.kubeconfig
EOF

  # Ready: the apiserver answers /readyz with the admin token (its
  # bootstrap RBAC roles exist by then).
  local ok=0
  for _ in $(seq 600); do
    if curl -sf --cacert "$pki/ca.crt" -H "Authorization: Bearer $admin_token" \
        "https://127.0.0.1:$api_port/readyz" >/dev/null 2>&1; then ok=1; break; fi
    kill -0 "$(cat "$dir/run/kube-apiserver.pid")" 2>/dev/null \
      || die "kube-apiserver exited; see $dir/log/kube-apiserver.log"
    sleep 0.1
  done
  [ "$ok" = 1 ] || die "kube-apiserver not ready within 60 s; see $dir/log/kube-apiserver.log"

  start_kwok
  cat "$dir/env"
}

case "$cmd" in
  start) start ;;
  stop)
    for p in kwok kube-scheduler kube-apiserver etcd; do stop_pid "$dir/run/$p.pid"; done
    ;;
  kwok-stop) stop_pid "$dir/run/kwok.pid" ;;
  kwok-start) start_kwok ;;
  kill) kill_now "${3:?name: etcd, kube-apiserver or kwok}" ;;
  restart) restart "${3:?name: etcd, kube-apiserver or kwok}" ;;
  signal) kill -"${4:?signal}" "$(cat "$dir/run/${3:?name}.pid")" ;;
  *) die "unknown command $cmd" ;;
esac
