//! The client socket: an async server on a thread of its own, so that no
//! client, however slow or numerous, can stall the cycle or the lock's
//! heartbeat.
//!
//! Why async (tokio, one thread) rather than a thread per client or a
//! bounded pool: a client that holds its connection open costs a thread
//! and its stack in the one, and a worker in the other (a user holding as
//! many connections as there are workers would shut everyone else out);
//! here it costs a descriptor and a task of a few hundred bytes, so the
//! bounds can be generous and still hold. The bounds, each refused with
//! its limit named ([`crate::config::LimitsConfig`]):
//!
//! * connections in all and per uid (the total also kept below the
//!   descriptor limit, less a reserve for Slurm's commands, so clients can
//!   never take the descriptors `squeue` and `sbatch` need);
//! * a deadline for the whole request, from the connection's acceptance
//!   (a client trickling a byte at a time is cut off when it passes);
//! * the request's size, checked against the caller's limit before
//!   anything is read into memory, and read as it arrives (a client that
//!   announces a megabyte and sends a byte costs a byte).
//!
//! The caller is who the kernel says (`SO_PEERCRED`). A request read whole
//! goes to the cycle thread, which answers between cycles; the answer is
//! written within the same deadline. SIGTERM and SIGINT are caught here
//! and become a clean stop of the daemon ([`Event::Stop`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::time::{Instant, timeout_at};

use super::events::Event;
use crate::SlurmError;
use crate::identity::Peer;
use crate::protocol::{MAX_MESSAGE, Request, Response};

/// Descriptors kept for the daemon itself (Slurm's commands and their
/// pipes, the state files, the records): clients never get them.
pub(super) const RESERVED_DESCRIPTORS: u64 = 256;

/// How long a refusal may take to write before the connection is dropped.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);

/// The socket's bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Limits {
    /// Connections open at once, in all.
    pub(super) total: usize,
    /// Connections open at once per uid.
    pub(super) per_user: usize,
    /// Time for a whole request, from acceptance; the answer's write gets
    /// as long again.
    pub(super) request: Duration,
    /// Largest request from a caller who is not an admin.
    pub(super) user_bytes: usize,
    /// Uids allowed requests up to [`MAX_MESSAGE`] (root, the daemon's
    /// user, listed admins).
    pub(super) admins: Vec<u32>,
}

impl Limits {
    /// The bounds of `cfg`, the total kept below `descriptors` (the
    /// process's limit) less [`RESERVED_DESCRIPTORS`].
    pub(super) fn new(cfg: &crate::config::Config, descriptors: u64, admins: Vec<u32>) -> Limits {
        let room = usize::try_from(descriptors.saturating_sub(RESERVED_DESCRIPTORS))
            .unwrap_or(usize::MAX)
            .max(1);
        Limits {
            total: cfg.limits.connections.min(room),
            per_user: cfg.limits.connections_per_user,
            request: Duration::from_secs(cfg.limits.request_timeout_s),
            user_bytes: cfg.limits.request_bytes,
            admins,
        }
    }
}

/// Open connections, in all and per uid.
#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_uid: BTreeMap<u32, usize>,
}

/// A connection's place in [`Counts`], given back when it is dropped.
struct Admitted {
    counts: Arc<Mutex<Counts>>,
    uid: u32,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_uid.get_mut(&self.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_uid.remove(&self.uid);
            }
        }
    }
}

/// Takes a place for a connection of `uid`, or says which bound it is over.
fn admit(counts: &Arc<Mutex<Counts>>, uid: u32, limits: &Limits) -> Result<Admitted, String> {
    let mut c = counts.lock().unwrap_or_else(|e| e.into_inner());
    let mine = c.per_uid.get(&uid).copied().unwrap_or(0);
    if mine >= limits.per_user {
        return Err(format!(
            "uid {uid} has {mine} connections open to the daemon, its limit \
             (limits.connections_per_user = {}); close some and try again",
            limits.per_user
        ));
    }
    if c.total >= limits.total {
        return Err(format!(
            "the daemon has {} client connections open, its limit (limits.connections, \
             kept below its descriptor limit); try again",
            c.total
        ));
    }
    c.total += 1;
    *c.per_uid.entry(uid).or_insert(0) += 1;
    Ok(Admitted {
        counts: Arc::clone(counts),
        uid,
    })
}

/// Starts the socket's thread: accepts clients on `listener` within
/// `limits`, hands their requests to the cycle thread through `events`,
/// and turns SIGTERM and SIGINT into [`Event::Stop`].
pub(super) fn spawn(
    listener: std::os::unix::net::UnixListener,
    limits: Limits,
    events: mpsc::Sender<Event>,
) -> Result<std::thread::JoinHandle<()>, SlurmError> {
    let io = |what: &str, e| SlurmError::io(what.to_string(), e);
    listener
        .set_nonblocking(true)
        .map_err(|e| io("making the socket non-blocking", e))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| io("starting the socket's runtime", e))?;
    std::thread::Builder::new()
        .name("gangway-socket".into())
        .spawn(move || rt.block_on(serve_socket(listener, limits, events)))
        .map_err(|e| io("starting the socket's thread", e))
}

/// The socket's loop: accepts until the cycle thread is gone.
async fn serve_socket(
    listener: std::os::unix::net::UnixListener,
    limits: Limits,
    events: mpsc::Sender<Event>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let listener = match tokio::net::UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("the socket cannot be served: {e}");
            let _ = events.send(Event::Stop("the socket cannot be served".into()));
            return;
        }
    };
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            tracing::error!("cannot catch SIGTERM and SIGINT: a stop will not release the lock");
            let _ = events.send(Event::Stop("signals cannot be caught".into()));
            return;
        }
    };
    let limits = Arc::new(limits);
    let counts = Arc::new(Mutex::new(Counts::default()));
    loop {
        tokio::select! {
            _ = term.recv() => { let _ = events.send(Event::Stop("SIGTERM".into())); }
            _ = int.recv() => { let _ = events.send(Event::Stop("SIGINT".into())); }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let (limits, counts, events) =
                        (Arc::clone(&limits), Arc::clone(&counts), events.clone());
                    tokio::spawn(async move { connection(stream, &limits, &counts, events).await });
                }
                Err(e) => {
                    // Out of descriptors or memory: wait, never spin.
                    tracing::warn!("accepting a client: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// Writes `response` (length-prefixed postcard), best effort.
async fn write_response(stream: &mut UnixStream, response: &Response) -> std::io::Result<()> {
    let bytes = postcard::to_allocvec(response).map_err(std::io::Error::other)?;
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    stream.write_all(&len.to_le_bytes()).await?;
    stream.write_all(&bytes).await?;
    stream.flush().await
}

/// Says why the connection is refused (within [`REFUSAL_WRITE`]) and
/// drops it.
async fn refuse(mut stream: UnixStream, why: String) {
    let refusal = Response::Refused(why);
    let _ = tokio::time::timeout(REFUSAL_WRITE, write_response(&mut stream, &refusal)).await;
    let _ = stream.shutdown().await;
}

/// One client: admitted within the bounds, its request read whole by the
/// deadline, handed to the cycle thread, answered.
async fn connection(
    mut stream: UnixStream,
    limits: &Limits,
    counts: &Arc<Mutex<Counts>>,
    events: mpsc::Sender<Event>,
) {
    let Ok(cred) = stream.peer_cred() else {
        return;
    };
    let peer = Peer {
        uid: cred.uid(),
        gid: cred.gid(),
        pid: cred.pid().unwrap_or(0),
    };
    let _admitted = match admit(counts, peer.uid, limits) {
        Ok(a) => a,
        Err(why) => return refuse(stream, why).await,
    };
    let deadline = Instant::now() + limits.request;
    let limit = if limits.admins.contains(&peer.uid) {
        MAX_MESSAGE
    } else {
        limits.user_bytes
    };
    let request = match timeout_at(deadline, read_request(&mut stream, limit)).await {
        Ok(Ok(r)) => r,
        Ok(Err(why)) => return refuse(stream, why).await,
        Err(_) => {
            let why = format!(
                "the request did not arrive whole within {} s (limits.request_timeout_s)",
                limits.request.as_secs()
            );
            return refuse(stream, why).await;
        }
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    if events.send(Event::Client(request, peer, reply)).is_err() {
        return;
    }
    let Ok(response) = answer.await else {
        return;
    };
    let write_by = Instant::now() + limits.request;
    let _ = timeout_at(write_by, write_response(&mut stream, &response)).await;
}

/// Reads one length-prefixed request of at most `limit` bytes: the length
/// is checked before anything else is read, and the body is read as it
/// arrives (never allocated at the announced size).
async fn read_request(stream: &mut UnixStream, limit: usize) -> Result<Request, String> {
    let mut len = [0u8; 4];
    stream
        .read_exact(&mut len)
        .await
        .map_err(|e| format!("reading the request: {e}"))?;
    let len = u32::from_le_bytes(len) as usize;
    if len > limit {
        return Err(format!(
            "a request of {len} bytes is over the {limit}-byte limit for your requests \
             (limits.request_bytes; admins may send up to {MAX_MESSAGE})"
        ));
    }
    let mut body = Vec::new();
    let read = (&mut *stream)
        .take(len as u64)
        .read_to_end(&mut body)
        .await
        .map_err(|e| format!("reading the request: {e}"))?;
    if read < len {
        return Err(format!(
            "the connection closed after {read} of the request's {len} bytes"
        ));
    }
    postcard::from_bytes(&body).map_err(|e| format!("the request cannot be read: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_bounded_per_user_and_in_all() {
        let limits = Limits {
            total: 3,
            per_user: 2,
            request: Duration::from_secs(1),
            user_bytes: 4096,
            admins: Vec::new(),
        };
        let counts = Arc::new(Mutex::new(Counts::default()));
        let a1 = admit(&counts, 7, &limits).unwrap();
        let _a2 = admit(&counts, 7, &limits).unwrap();
        let e = admit(&counts, 7, &limits).err().unwrap();
        assert!(e.contains("limits.connections_per_user = 2"), "{e}");
        let _b1 = admit(&counts, 8, &limits).unwrap();
        let e = admit(&counts, 9, &limits).err().unwrap();
        assert!(e.contains("limits.connections"), "{e}");
        drop(a1);
        assert!(admit(&counts, 9, &limits).is_ok());
        assert_eq!(
            counts.lock().unwrap().per_uid.get(&9),
            None,
            "given back on drop"
        );
    }
}
