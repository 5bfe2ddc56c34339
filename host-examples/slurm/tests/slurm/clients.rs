//! The socket with limits, with real users: 1,000 held and slow
//! connections from one user, under a service manager's descriptor limit
//! of 1,024, leave another user's status and submit answered within a
//! second and the cycle and the lock's heartbeat running; an oversize
//! request, a job too large to keep, a job over what its user may keep
//! queued (not another user's) and one job too many are refused,
//! each naming its limit.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gangway_slurm::client::{self, Daemon};

use super::harness::{Cluster, SERIAL, User, slurm_here, text, user};
use super::security::shared_config;

/// Opens N connections as its user (every other one announcing a 100 KB
/// request and sending a byte a second, the others sending nothing), holds
/// them S seconds, then says how many the daemon answered (refused) and
/// how many it still held.
const FLOOD_PY: &str = r#"
import resource, socket, struct, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
path, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
conns, failed = [], 0
for i in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError:
        failed += 1
        s.close()
        continue
    if i % 2:
        s.sendall(struct.pack('<I', 100000))
    conns.append((i % 2 == 1, s))
print(f"connected {len(conns)} failed {failed}", flush=True)
end = time.time() + secs
while time.time() < end:
    for slow, s in conns:
        if slow:
            try:
                s.send(b'x')
            except OSError:
                pass
    time.sleep(1)
answered = held = 0
for _, s in conns:
    s.setblocking(False)
    try:
        s.recv(4096)
        answered += 1
    except BlockingIOError:
        held += 1
    except OSError:
        answered += 1
print(f"answered {answered} held {held}", flush=True)
"#;

/// The status report as `user` sees it, and how long it took.
fn timed_status(cluster: &Cluster, user: &User) -> Duration {
    let t = Instant::now();
    let out = cluster.gangway_as(user, &["status", "--json", "--timeout", "10"]);
    assert!(out.status.success(), "{}", text(&out));
    t.elapsed()
}

#[test]
fn held_and_slow_connections_leave_others_served() {
    if !slurm_here("1,000 held and slow connections") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (alice, mallory) = (user("alice"), user("mallory"));
    let mut cluster = Cluster::start("flood", None);
    let config = shared_config(&cluster, "lock_stale_s = 20\n");
    cluster.configure("shared.toml", &config);
    // A service manager's default: 1,024 descriptors.
    cluster.start_daemon_limited(1024);
    let script = cluster.dir.join("flood.py");
    std::fs::write(&script, FLOOD_PY).unwrap();
    let socket = cluster.socket();
    let before = cluster.status().stats;
    let mut flood = Command::new("python3");
    flood
        .arg(&script)
        .arg(&socket)
        .args(["1000", "25"])
        .stdout(Stdio::piped());
    cluster.as_user(&mut flood, &mallory);
    let flood = flood.spawn().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    // alice, meanwhile: status, submit, and her job runs.
    let mut slowest = Duration::ZERO;
    let mut submits = Vec::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(20) {
        slowest = slowest.max(timed_status(&cluster, &alice));
        if submits.len() < 3 {
            let asked = Instant::now();
            let id = cluster.submit_as(&alice, 1, "prod", &["sleep", "1"]);
            submits.push((id, asked.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let worst_submit = submits.iter().map(|(_, d)| *d).max().unwrap();
    assert!(slowest < Duration::from_secs(1), "status took {slowest:?}");
    assert!(
        worst_submit < Duration::from_secs(1),
        "submit took {worst_submit:?}"
    );
    let during = cluster.status().stats;
    for (id, _) in &submits {
        let j = cluster.finished(30, *id);
        assert_eq!(j.state, "passed", "{:?}", j.events);
    }
    let out = flood.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every connection was answered (refused for its bound or its
    // deadline): none is held past the request deadline.
    assert!(said.contains(" held 0"), "{said}");
    let cycles = during.cycles - before.cycles;
    assert!(cycles >= 20, "{cycles} cycles in 20 s");
    // The lock's heartbeat kept beating.
    let squeue = cluster.slurm(&["squeue", "-h", "-n", "gangway-lock", "-o", "%k"]);
    let beat: u64 = squeue.trim().split(':').nth(5).unwrap().parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now - beat <= 15, "last heartbeat {} s ago", now - beat);
    let rss = cluster.status().stats.rss_kib;
    assert!(rss < 100 << 10, "the daemon grew to {rss} KiB");
    println!(
        "clients: {} held 1,000 connections ({}); alice's status at worst {slowest:?}, submit at \
         worst {worst_submit:?}; {cycles} cycles meanwhile; heartbeat {} s old; daemon {} KiB",
        mallory.name,
        said.trim().replace('\n', ", "),
        now - beat,
        rss
    );
    cluster.passed = true;
}

#[test]
fn limits_are_named_in_refusals() {
    if !slurm_here("limits named in refusals") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (alice, mallory) = (user("alice"), user("mallory"));
    let mut cluster = Cluster::start("limits", None);
    let config = format!(
        "{}\n[limits]\nrequest_bytes = 65536\njob_bytes = 32768\nqueued_jobs_per_user = 2\n\
         queued_bytes_per_user = 40000\n",
        shared_config(&cluster, "")
    );
    cluster.configure("limits.toml", &config);
    cluster.start_daemon();
    let submit_with = |who: &User, vc: &str, value: &str| {
        let mut cmd = Command::new(cluster.dir.join("bin/gangway-slurm"));
        cmd.args(["submit", "--gpus", "1", "--vc", vc, "--", "sleep", "30"]);
        cluster.as_user(&mut cmd, who);
        cmd.env("BIG", value);
        cmd.output().unwrap()
    };
    // Over the request limit: refused with the limit, not a broken pipe.
    let out = submit_with(&alice, "prod", &"x".repeat(100_000));
    let said = text(&out);
    assert!(
        !out.status.success()
            && said.contains("over the 65536-byte limit")
            && said.contains("limits.request_bytes"),
        "{said}"
    );
    // Small enough to send, too large to keep.
    let out = submit_with(&alice, "prod", &"x".repeat(40_000));
    let said = text(&out);
    assert!(
        !out.status.success() && said.contains("limits.job_bytes"),
        "{said}"
    );
    // Each of 20,000 bytes is under job_bytes; two of one user's are over
    // what one user may keep (40,000), and another user's first is not.
    let big = "x".repeat(20_000);
    let out = submit_with(&alice, "prod", &big);
    assert!(out.status.success(), "{}", text(&out));
    let out = submit_with(&alice, "prod", &big);
    let said = text(&out);
    assert!(
        !out.status.success()
            && said.contains("limits.queued_bytes_per_user")
            && said.contains("the 40000-byte limit"),
        "{said}"
    );
    let out = submit_with(&mallory, "research", &big);
    assert!(out.status.success(), "{}", text(&out));
    // One job too many.
    assert!(submit_with(&alice, "prod", "small").status.success());
    let out = submit_with(&alice, "prod", "small");
    let said = text(&out);
    assert!(
        !out.status.success() && said.contains("limits.queued_jobs_per_user = 2"),
        "{said}"
    );
    let socket = cluster.socket();
    let s = client::status(&Daemon::at(&socket), None).unwrap();
    let live: Vec<&str> = s
        .pending
        .iter()
        .chain(&s.running)
        .map(|j| j.user.as_str())
        .collect();
    assert_eq!(live.len(), 3, "{live:?}");
    assert_eq!(live.iter().filter(|u| **u == alice.name).count(), 2);
    println!(
        "clients: an oversize request, a job too large to keep, a job over its user's queued \
         bytes (another user's alike was taken) and a third job were refused, each naming its limit"
    );
    cluster.passed = true;
}
