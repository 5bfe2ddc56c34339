//! Serving: the socket (with the permissions `access.socket` asks for),
//! a thread per client (its caller from the kernel), Slurm's commands on a
//! thread of their own, and the cycle loop.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{
    CancelOrder, Daemon, JobUpdate, LaunchOrder, LaunchOutcome, run_cancels, run_launches,
};
use crate::SlurmError;
use crate::access::Caller;
use crate::config::{Config, SocketAccess};
use crate::engine::{NodeInfo, Slurm, SlurmJob};
use crate::identity::{self, Peer};
use crate::protocol::{
    MAX_MESSAGE, MAX_USER_MESSAGE, Request, Response, read_message_within, write_message,
};

/// How long a client may take to send its request.
const CLIENT_READ: Duration = Duration::from_secs(10);

/// What Slurm's I/O thread is asked to do, in order.
enum Work {
    /// Read `sinfo` and `squeue`.
    Read,
    /// Run these launches.
    Launch(Vec<LaunchOrder>),
    /// Cancel these Slurm jobs.
    Cancel(Vec<CancelOrder>),
    /// Update these Slurm jobs.
    Update(Vec<JobUpdate>),
}

/// What the cycle thread hears: a client, or Slurm's I/O thread.
enum Event {
    /// A client's request, who sent it, and where to answer.
    Client(Request, Peer, mpsc::Sender<Response>),
    /// What Slurm said, and how long it took.
    Read(Result<(Vec<NodeInfo>, Vec<SlurmJob>), SlurmError>, Duration),
    /// How launches went.
    Launched(Vec<(LaunchOrder, LaunchOutcome)>),
    /// Cancels Slurm did not answer for.
    CancelFailed(Vec<CancelOrder>),
}

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
            Work::Launch(orders) => Event::Launched(run_launches(&slurm, orders)),
            Work::Cancel(cancels) => Event::CancelFailed(run_cancels(&slurm, cancels)),
            Work::Update(updates) => {
                run_updates(&slurm, updates);
                continue;
            }
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

/// One client: its caller from the kernel, its request (a non-admin's at
/// most [`MAX_USER_MESSAGE`] bytes), the answer.
fn client(mut stream: UnixStream, admins: Vec<u32>, tx: mpsc::Sender<Event>) {
    let Ok(peer) = identity::peer(&stream) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(CLIENT_READ));
    let _ = stream.set_write_timeout(Some(CLIENT_READ));
    // Swaps (large) are for admins; whoever else is capped before the
    // request is even read.
    let limit = if admins.contains(&peer.uid) {
        MAX_MESSAGE
    } else {
        MAX_USER_MESSAGE
    };
    let request: Request = match read_message_within(&mut stream, limit) {
        Ok(r) => r,
        Err(e) => {
            let _ = write_message(&mut stream, &Response::Refused(e.to_string()));
            return;
        }
    };
    let (reply_tx, reply_rx) = mpsc::channel();
    if tx.send(Event::Client(request, peer, reply_tx)).is_err() {
        return;
    }
    if let Ok(response) = reply_rx.recv() {
        let _ = write_message(&mut stream, &response);
    }
}

/// Accepts clients, a thread each.
fn accept(listener: UnixListener, admins: Vec<u32>, tx: mpsc::Sender<Event>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let (tx, admins) = (tx.clone(), admins.clone());
        std::thread::spawn(move || client(stream, admins, tx));
    }
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

/// Runs the daemon until it is killed: binds the socket, then cycles every
/// `poll_interval_ms`. Slurm's commands run on a thread of their own, so
/// clients are answered at once whatever Slurm is doing.
pub fn serve(cfg: Config) -> Result<(), SlurmError> {
    let poll = Duration::from_millis(cfg.poll_interval_ms);
    let admins = big_senders(&cfg);
    let mut daemon = Daemon::start(cfg)?;
    let listener = bind(&daemon.cfg)?;
    let (tx, rx) = mpsc::channel::<Event>();
    let clients = tx.clone();
    std::thread::spawn(move || accept(listener, admins, clients));
    let (work, work_rx) = mpsc::channel::<Work>();
    let io_slurm = daemon.slurm.clone();
    std::thread::spawn(move || slurm_io(io_slurm, work_rx, tx));
    tracing::info!(
        "gangway-slurm {} serving on {} ({} nodes, {} GPUs, {:?} mode{})",
        daemon.id,
        daemon.cfg.socket().display(),
        daemon.map.topology.servers().len(),
        daemon.map.topology.total_gpus(),
        daemon.cfg.mode,
        if daemon.stats.recovered {
            ", recovered saved state"
        } else {
            ""
        }
    );
    run_loop(&mut daemon, poll, &rx, &work)
}

/// The cycle loop: a read every `poll`, clients answered in between.
fn run_loop(
    daemon: &mut Daemon,
    poll: Duration,
    rx: &mpsc::Receiver<Event>,
    work: &mpsc::Sender<Work>,
) -> Result<(), SlurmError> {
    let stopped = || SlurmError::Protocol("a thread of the daemon stopped".into());
    let mut reading = false;
    let mut next_read = Instant::now();
    loop {
        if !reading && Instant::now() >= next_read {
            work.send(Work::Read).map_err(|_| stopped())?;
            reading = true;
        }
        let cancels = daemon.take_cancels();
        if !cancels.is_empty() {
            work.send(Work::Cancel(cancels)).map_err(|_| stopped())?;
        }
        let updates = daemon.take_updates();
        if !updates.is_empty() {
            work.send(Work::Update(updates)).map_err(|_| stopped())?;
        }
        let wait = if reading {
            poll.max(Duration::from_millis(100))
        } else {
            next_read.saturating_duration_since(Instant::now())
        };
        match rx.recv_timeout(wait) {
            Ok(Event::Client(request, peer, reply)) => {
                let caller: Caller = daemon.access.caller(peer);
                let (response, urgent) = daemon.handle(request, &caller);
                if daemon.dirty
                    && let Err(e) = daemon.save()
                {
                    tracing::error!("saving state: {e}");
                    daemon.last_error = Some(e.to_string());
                }
                let _ = reply.send(response);
                if urgent && !reading {
                    next_read = Instant::now();
                }
            }
            Ok(Event::Read(read, took)) => {
                reading = false;
                next_read = Instant::now() + poll;
                if let Err(e) = &read {
                    tracing::error!("cycle: {e}");
                }
                let orders = daemon.on_read(read, took);
                if !orders.is_empty() {
                    work.send(Work::Launch(orders)).map_err(|_| stopped())?;
                }
            }
            Ok(Event::Launched(results)) => daemon.on_launched(results),
            Ok(Event::CancelFailed(failed)) => daemon.retry_cancels(failed),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(stopped()),
        }
    }
}
