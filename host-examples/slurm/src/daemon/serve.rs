//! Serving: the socket (with the permissions `access.socket` asks for,
//! served by [`super::socket`] on a thread of its own), Slurm's commands
//! on another, end records on a third ([`super::records`]), and the cycle
//! loop, which alone owns the daemon's state. A clean stop (SIGTERM,
//! SIGINT) gives the partition's lock back and exits; a daemon that lost
//! its lock exits without deciding anything more.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::events::{Event, Work};
use super::{Daemon, JobUpdate, run_cancels, run_launches};
use crate::SlurmError;
use crate::access::Caller;
use crate::config::{Config, SocketAccess};
use crate::engine::Slurm;
use crate::identity;

/// Runs `scontrol update` (or a verb) for each update; failures are logged.
pub(super) fn run_updates(slurm: &Slurm, updates: Vec<JobUpdate>) {
    for u in updates {
        let done = match u.fields.as_slice() {
            [verb] if !verb.contains('=') => slurm.job_verb(verb, u.job),
            fields => slurm.update_job(u.job, fields),
        };
        if let Err(e) = done {
            tracing::warn!(slurm_job = u.job, "{e}");
        }
    }
}

/// Slurm's I/O thread: runs the work it is given, in order, and reports.
/// Work runs in the order it was asked for, so a read asked after launches
/// sees them.
fn slurm_io(slurm: Slurm, work: mpsc::Receiver<Work>, events: mpsc::Sender<Event>) {
    for w in work {
        let event = match w {
            Work::Read => {
                let t = Instant::now();
                let read = slurm.nodes().and_then(|n| Ok((n, slurm.jobs()?)));
                Event::Read(read, t.elapsed())
            }
            Work::Launch(orders, fence) => {
                Event::Launched(run_launches(&slurm, orders, fence.as_ref()))
            }
            Work::Cancel(cancels) => Event::CancelFailed(run_cancels(&slurm, cancels)),
            Work::Update(updates) => {
                run_updates(&slurm, updates);
                continue;
            }
            Work::Release(lock) => Event::Released(match lock {
                Some(lock) => crate::lock::release(&slurm, &lock).map_err(|e| e.to_string()),
                None => Ok(()),
            }),
        };
        if events.send(event).is_err() {
            return;
        }
    }
}

/// Binds the socket with the permissions `access.socket` asks for: the
/// daemon's user only (0600), a group (0660), or everyone (0666; each
/// request is still authorized by its caller).
fn bind(cfg: &Config) -> Result<UnixListener, SlurmError> {
    let socket = cfg.socket();
    if UnixStream::connect(&socket).is_ok() {
        return Err(SlurmError::Refused(format!(
            "another daemon is already listening on {}",
            socket.display()
        )));
    }
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)
        .map_err(|e| SlurmError::io(format!("binding {}", socket.display()), e))?;
    let mode = match cfg.access.socket {
        SocketAccess::Owner => 0o600,
        SocketAccess::Group => 0o660,
        SocketAccess::Everyone => 0o666,
    };
    if let Some(group) = &cfg.access.socket_group {
        let gid = identity::group_id(group).ok_or_else(|| SlurmError::Config {
            file: cfg.file.clone(),
            message: format!("access.socket_group {group:?} does not exist on this host"),
        })?;
        std::os::unix::fs::chown(&socket, None, Some(gid)).map_err(|e| {
            SlurmError::io(format!("giving {} to group {group}", socket.display()), e)
        })?;
    }
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(mode))
        .map_err(|e| SlurmError::io(format!("setting the mode of {}", socket.display()), e))?;
    Ok(listener)
}

/// Uids allowed large requests: root, the daemon's user, and the listed
/// admins (admin groups are checked per request).
fn big_senders(cfg: &Config) -> Vec<u32> {
    let mut uids = vec![0, identity::effective_uid()];
    uids.extend(
        cfg.access
            .admins
            .iter()
            .filter_map(|n| identity::user_by_name(n))
            .map(|u| u.uid),
    );
    uids
}

/// Runs the daemon until it is stopped: binds the socket, then cycles
/// every `poll_interval_ms`. Slurm's commands run on a thread of their
/// own, so clients are answered at once whatever Slurm is doing; clients
/// are served within `[limits]` on the socket's thread. Returns when a
/// signal stops it (the lock given back), or with an error when it lost
/// its lock.
pub fn serve(cfg: Config) -> Result<(), SlurmError> {
    let poll = Duration::from_millis(cfg.poll_interval_ms);
    let admins = big_senders(&cfg);
    let descriptors = identity::raise_descriptor_limit().unwrap_or(1024);
    let mut daemon = Daemon::start(cfg)?;
    let listener = bind(&daemon.cfg)?;
    let limits = super::socket::Limits::new(&daemon.cfg, descriptors, admins);
    let (tx, rx) = mpsc::channel::<Event>();
    let records = tx.clone();
    daemon.record_reader = Some(super::records::spawn_reader(Box::new(move |read| {
        records.send(Event::Records(read)).is_ok()
    })));
    let socket = super::socket::spawn(listener, limits.clone(), tx.clone())?;
    let (work, work_rx) = mpsc::channel::<Work>();
    let io_slurm = daemon.slurm.clone();
    std::thread::Builder::new()
        .name("gangway-slurm-io".into())
        .spawn(move || slurm_io(io_slurm, work_rx, tx))
        .map_err(|e| SlurmError::io("starting Slurm's I/O thread", e))?;
    tracing::info!(
        "gangway-slurm {} serving partition {} on {} ({} nodes, {} GPUs, {:?} mode{}; \
         at most {} clients, {} per user)",
        daemon.id,
        daemon.served.partition,
        daemon.cfg.socket().display(),
        daemon.map.topology.servers().len(),
        daemon.map.topology.total_gpus(),
        daemon.cfg.mode,
        if daemon.stats.recovered {
            ", recovered saved state"
        } else {
            ""
        },
        limits.total,
        limits.per_user,
    );
    let ended = run_loop(&mut daemon, poll, &rx, &work);
    let _ = std::fs::remove_file(daemon.cfg.socket());
    drop(socket);
    ended
}

/// Where the cycle loop is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Cycling.
    Serving,
    /// Stopping: the lock's release asked, nothing new started.
    Stopping,
}

/// Where the cycle loop is between events.
struct Loop {
    /// A read of Slurm is under way.
    reading: bool,
    /// Serving or stopping.
    phase: Phase,
    /// When the next read is due.
    next_read: Instant,
    /// Milliseconds between reads.
    poll: Duration,
}

fn stopped() -> SlurmError {
    SlurmError::Protocol("a thread of the daemon stopped".into())
}

/// The cycle loop: a read every `poll`, clients answered in between.
fn run_loop(
    daemon: &mut Daemon,
    poll: Duration,
    rx: &mpsc::Receiver<Event>,
    work: &mpsc::Sender<Work>,
) -> Result<(), SlurmError> {
    let mut at = Loop {
        reading: false,
        phase: Phase::Serving,
        next_read: Instant::now(),
        poll,
    };
    loop {
        if let Some(why) = daemon.lost_lock() {
            let why = why.to_string();
            let _ = daemon.save();
            return Err(SlurmError::Refused(format!(
                "this daemon stops: {why} (another daemon serves the partition)"
            )));
        }
        if at.phase == Phase::Serving {
            if !at.reading && Instant::now() >= at.next_read {
                work.send(Work::Read).map_err(|_| stopped())?;
                at.reading = true;
            }
            send_work(daemon, work)?;
        }
        let wait = if at.reading || at.phase == Phase::Stopping {
            poll.max(Duration::from_millis(100))
        } else {
            at.next_read.saturating_duration_since(Instant::now())
        };
        match rx.recv_timeout(wait) {
            Ok(event) => {
                if on_event(daemon, event, &mut at, work)? {
                    return Ok(());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(stopped()),
        }
    }
}

/// One event of the cycle loop; `true` once the daemon has stopped.
fn on_event(
    daemon: &mut Daemon,
    event: Event,
    at: &mut Loop,
    work: &mpsc::Sender<Work>,
) -> Result<bool, SlurmError> {
    match event {
        Event::Client(request, peer, reply) => {
            let caller: Caller = daemon.access.caller(peer);
            let (response, urgent) = daemon.handle(request, &caller);
            if urgent {
                daemon.retire();
            }
            if daemon.dirty
                && let Err(e) = daemon.save()
            {
                tracing::error!("saving state: {e}");
                daemon.last_error = Some(e.to_string());
            }
            let _ = reply.send(response);
            if urgent && at.phase == Phase::Serving {
                // A new job starts now, on the current view, not at the
                // next read.
                let orders = daemon.round_now();
                send_work(daemon, work)?;
                if !orders.is_empty() {
                    let fence = daemon.lock().cloned();
                    work.send(Work::Launch(orders, fence))
                        .map_err(|_| stopped())?;
                }
            }
        }
        Event::Read(read, took) => {
            at.reading = false;
            at.next_read = Instant::now() + at.poll;
            if let Err(e) = &read {
                tracing::error!("cycle: {e}");
            }
            let orders = daemon.on_read(read, took);
            // Cancels first: a migrated job's old run is taken back before
            // it is launched again.
            send_work(daemon, work)?;
            if !orders.is_empty() && at.phase == Phase::Serving {
                let fence = daemon.lock().cloned();
                work.send(Work::Launch(orders, fence))
                    .map_err(|_| stopped())?;
            }
        }
        Event::Launched(results) => daemon.on_launched(results),
        Event::CancelFailed(failed) => daemon.retry_cancels(failed),
        Event::Records(read) => daemon.on_records(read),
        Event::Stop(why) if at.phase == Phase::Serving => {
            tracing::info!("{why}: stopping; the partition's lock is given back");
            at.phase = Phase::Stopping;
            work.send(Work::Release(daemon.lock().cloned()))
                .map_err(|_| stopped())?;
        }
        Event::Stop(_) => {}
        Event::Released(result) => {
            if let Err(e) = result {
                tracing::warn!("giving the lock back: {e}");
            }
            daemon.save()?;
            tracing::info!("stopped");
            return Ok(true);
        }
    }
    Ok(false)
}

/// Hands Slurm's I/O thread the cancels and updates due.
fn send_work(daemon: &mut Daemon, work: &mpsc::Sender<Work>) -> Result<(), SlurmError> {
    let cancels = daemon.take_cancels();
    if !cancels.is_empty() {
        work.send(Work::Cancel(cancels)).map_err(|_| stopped())?;
    }
    let updates = daemon.take_updates();
    if !updates.is_empty() {
        work.send(Work::Update(updates)).map_err(|_| stopped())?;
    }
    Ok(())
}
