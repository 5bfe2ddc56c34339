//! The daemon's saved state: `<state_dir>/state.bin`, rewritten (to a
//! temporary file, synced, then renamed over the old one, the folder
//! synced) after every change and before every batch of launches; the
//! state it replaces is kept as `state.bin.prev`. A change is answered
//! only once it is saved this way, and every acknowledged change (a
//! submission, a cancel, a swap, a rollback) is first appended to
//! `journal.jsonl`, so a daemon that must fall back to the previous state
//! says which acknowledged changes it lost ([`lost_since`]).
//!
//! It holds the scheduler's snapshot ([`gangway_core::snapshot::Snapshot`], itself
//! versioned) and the daemon's own job table: each job's user, command,
//! environment, times, events and current launch. A launch whose `sbatch`
//! had not answered when the state was written has no Slurm job id; on
//! restart the daemon looks for it in `squeue` by its tag before deciding
//! it never happened, so no job is started twice.
//!
//! Every file here is private to the daemon's user (0600): it holds users'
//! commands and environments. [`prepare_folder`] checks the folder and
//! files at start.
//!
//! Encoding (version 3): the 7 bytes `GWSLURM`, the format version as a
//! postcard varint ([`STATE_VERSION`]), the SHA-256 of the rest (32 bytes),
//! then [`State`] as postcard. A file whose digest does not match is
//! refused, and the previous state is used instead (the daemon says so);
//! version 1 and 2 files are still read.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::SlurmError;
use super::engine::NodeGpus;

/// The state format this build writes (it also reads versions 1 and 2).
pub const STATE_VERSION: u32 = 3;

const MAGIC: &[u8; 7] = b"GWSLURM";

/// The current launch of a job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// Slurm's job id (`None` while `sbatch` has not answered).
    pub slurm_id: Option<u64>,
    /// Which launch of the job this is (1 for the first): its tag and end
    /// record name carry it.
    pub number: u32,
    /// Unix milliseconds of the `sbatch` call.
    pub launched_ms: u64,
    /// Where Gangway placed it.
    pub placement: NodeGpus,
    /// Whether Slurm has been seen running it.
    pub running: bool,
    /// Whether `squeue` showed the Slurm job with this launch's tag and
    /// the job's user (until then the id `sbatch` printed is not trusted:
    /// it is never cancelled).
    pub verified: bool,
    /// Whether Slurm took it (counted in [`JobEntry::attempts`]).
    pub taken: bool,
    /// The launch's secret: its end record must carry it.
    pub token: String,
}

/// One job as the daemon tracks it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEntry {
    /// Gangway's id.
    pub id: u64,
    /// Virtual cluster.
    pub vc: String,
    /// User name.
    pub user: String,
    /// The user's uid (from the kernel, or from Slurm in native mode).
    pub uid: u32,
    /// The user's primary gid.
    pub gid: u32,
    /// GPUs.
    pub gpus: u32,
    /// Command and arguments (empty for a job submitted with sbatch).
    pub cmd: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// The user's environment for the job.
    pub env: Vec<(String, String)>,
    /// Unix milliseconds of the submission.
    pub submitted_ms: u64,
    /// Launch numbers handed out (tags and end records).
    pub launches: u32,
    /// Launches Slurm took.
    pub attempts: u32,
    /// Launches Slurm refused (they count against `max_attempts`).
    pub refusals: u32,
    /// The current launch.
    pub launch: Option<Launch>,
    /// Where the last launch ran.
    pub last_placement: NodeGpus,
    /// Unix milliseconds it was first seen running.
    pub first_running_ms: Option<u64>,
    /// Unix milliseconds it finished.
    pub ended_ms: Option<u64>,
    /// How it ended (`passed`, `failed`, `killed`).
    pub final_state: Option<String>,
    /// Seconds it waited per reason, kept when it finished.
    pub wait_s: Vec<(String, u64)>,
    /// What happened to it, oldest first.
    pub events: Vec<String>,
    /// A cancel acknowledged (by this user): saved before it is applied,
    /// so a restart applies it again if need be.
    pub cancel: Option<String>,
    /// The Slurm job a user submitted with sbatch into the managed
    /// partition (native mode), which every launch pins and releases.
    pub native: Option<u64>,
}

/// What a swap or a rollback did to a slot, kept so that a restarted
/// daemon runs the policies it acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SlotChange {
    /// A module staged: its name, the SHA-256 (hex) of its bytes, kept in
    /// `<state_dir>/modules/<digest>.wasm`, and its configuration.
    Swap {
        /// The module's name.
        name: String,
        /// Its digest.
        digest: String,
        /// Its configuration (TOML bytes).
        config: Vec<u8>,
    },
    /// Back to the previous policy.
    Rollback,
}

/// Everything the daemon saves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Format version.
    pub version: u32,
    /// The scheduler's snapshot bytes.
    pub scheduler: Vec<u8>,
    /// The next job id.
    pub next_id: u64,
    /// User names; a user's number is its index.
    pub users: Vec<String>,
    /// Live jobs (pending, launching, running).
    pub jobs: Vec<JobEntry>,
    /// Recently finished jobs, oldest first.
    pub history: Vec<JobEntry>,
    /// Per live job, launches Slurm took that do not count against
    /// `max_attempts` (held for resources and placed again).
    pub uncounted: std::collections::BTreeMap<u64, u32>,
    /// This daemon's identity: its Slurm jobs' tags and its lock carry it.
    pub daemon_id: String,
    /// The journal lines this state covers.
    pub seq: u64,
    /// Swaps and rollbacks since the configured policies, per slot, in
    /// order (a rollback after a swap cancels it).
    pub slot_changes: Vec<(String, SlotChange)>,
}

/// One acknowledged change, as `journal.jsonl` records it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalLine {
    /// Its number (the state's `seq` says how far a state goes).
    pub seq: u64,
    /// Unix milliseconds.
    pub at_ms: u64,
    /// `submit`, `cancel`, `swap` or `rollback`.
    pub what: String,
    /// The job, if about one.
    pub job: Option<u64>,
    /// Who asked.
    pub user: String,
    /// What else identifies it (VC and GPUs, slot and module).
    pub detail: String,
}

/// The version 2 layout of a launch.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct LaunchV2 {
    slurm_id: Option<u64>,
    attempt: u32,
    launched_ms: u64,
    placement: NodeGpus,
    running: bool,
}

/// The version 1 and 2 layout of a job.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct JobEntryV2 {
    id: u64,
    vc: String,
    user: String,
    gpus: u32,
    cmd: Vec<String>,
    cwd: String,
    submitted_ms: u64,
    attempts: u32,
    launch: Option<LaunchV2>,
    last_placement: NodeGpus,
    first_running_ms: Option<u64>,
    ended_ms: Option<u64>,
    final_state: Option<String>,
    wait_s: Vec<(String, u64)>,
    events: Vec<String>,
}

impl JobEntryV2 {
    /// As version 3 holds it: run as the daemon's user, as it was; a launch
    /// with a Slurm id was trusted then and stays so.
    fn upgrade(self, uid: u32, gid: u32) -> JobEntry {
        JobEntry {
            id: self.id,
            vc: self.vc,
            user: self.user,
            uid,
            gid,
            gpus: self.gpus,
            cmd: self.cmd,
            cwd: self.cwd,
            env: Vec::new(),
            submitted_ms: self.submitted_ms,
            launches: self.attempts,
            attempts: self.attempts,
            refusals: 0,
            launch: self.launch.map(|l| Launch {
                verified: l.slurm_id.is_some(),
                taken: l.slurm_id.is_some(),
                slurm_id: l.slurm_id,
                number: l.attempt,
                launched_ms: l.launched_ms,
                placement: l.placement,
                running: l.running,
                token: String::new(),
            }),
            last_placement: self.last_placement,
            first_running_ms: self.first_running_ms,
            ended_ms: self.ended_ms,
            final_state: self.final_state,
            wait_s: self.wait_s,
            events: self.events,
            cancel: None,
            native: None,
        }
    }
}

/// [`State`] as version 2 wrote it.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct StateV2 {
    version: u32,
    scheduler: Vec<u8>,
    next_id: u64,
    users: Vec<String>,
    jobs: Vec<JobEntryV2>,
    history: Vec<JobEntryV2>,
    uncounted: std::collections::BTreeMap<u64, u32>,
}

/// [`State`] as version 1 wrote it.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct StateV1 {
    version: u32,
    scheduler: Vec<u8>,
    next_id: u64,
    users: Vec<String>,
    jobs: Vec<JobEntryV2>,
    history: Vec<JobEntryV2>,
}

impl StateV2 {
    /// As version 3 holds it (jobs run as the daemon's user, as they did).
    fn upgrade(self) -> State {
        let (uid, gid) = (super::identity::effective_uid(), 0);
        State {
            version: self.version,
            scheduler: self.scheduler,
            next_id: self.next_id,
            users: self.users,
            jobs: self.jobs.into_iter().map(|j| j.upgrade(uid, gid)).collect(),
            history: self
                .history
                .into_iter()
                .map(|j| j.upgrade(uid, gid))
                .collect(),
            uncounted: self.uncounted,
            ..State::default()
        }
    }
}

/// A state read back, and where from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// The state.
    pub state: State,
    /// Why the newest file could not be used, when this is the previous one.
    pub fell_back: Option<String>,
}

/// The state file in a state folder.
pub fn state_file(state_dir: &Path) -> PathBuf {
    state_dir.join("state.bin")
}

/// The previous state, kept beside it.
pub fn previous_file(state_dir: &Path) -> PathBuf {
    state_dir.join("state.bin.prev")
}

/// The bytes of `state` as [`save`] writes them.
pub fn encode(state: &State) -> Result<Vec<u8>, String> {
    let body = postcard::to_allocvec(state).map_err(|e| e.to_string())?;
    let mut bytes = MAGIC.to_vec();
    bytes.extend(postcard::to_allocvec(&STATE_VERSION).map_err(|e| e.to_string())?);
    bytes.extend_from_slice(&Sha256::digest(&body));
    bytes.extend(body);
    Ok(bytes)
}

/// The body after a version 2 or 3 header, if its digest matches.
fn checked_body(rest: &[u8]) -> Result<&[u8], String> {
    let (digest, body) = rest
        .split_at_checked(32)
        .ok_or("shorter than its checksum")?;
    if Sha256::digest(body).as_slice() != digest {
        return Err(format!(
            "checksum mismatch: {} bytes that are not what was written",
            body.len()
        ));
    }
    Ok(body)
}

/// Decodes all of `body` as a `T`.
fn whole<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let (value, tail) = postcard::take_from_bytes::<T>(body).map_err(|e| e.to_string())?;
    if !tail.is_empty() {
        return Err(format!("{} bytes after the state", tail.len()));
    }
    Ok(value)
}

/// Reads bytes written by [`encode`] (or by versions 1 and 2).
pub fn decode(bytes: &[u8]) -> Result<State, String> {
    let body = bytes
        .strip_prefix(&MAGIC[..])
        .ok_or("not a gangway-slurm state file")?;
    let (version, rest) =
        postcard::take_from_bytes::<u32>(body).map_err(|e| format!("format version: {e}"))?;
    match version {
        1 => {
            let v1: StateV1 = postcard::from_bytes(body).map_err(|e| e.to_string())?;
            Ok(StateV2 {
                version: v1.version,
                scheduler: v1.scheduler,
                next_id: v1.next_id,
                users: v1.users,
                jobs: v1.jobs,
                history: v1.history,
                uncounted: Default::default(),
            }
            .upgrade())
        }
        2 => Ok(whole::<StateV2>(checked_body(rest)?)?.upgrade()),
        STATE_VERSION => whole::<State>(checked_body(rest)?),
        v => Err(format!(
            "format version {v} is not supported (this build reads 1 to {STATE_VERSION})"
        )),
    }
}

/// Writes the state durably: to a temporary file, synced; the current
/// state is kept as the previous one; the new one is renamed in place and
/// the folder synced. An error means the new state is not on disk.
pub fn save(state_dir: &Path, state: &State) -> Result<(), SlurmError> {
    let path = state_file(state_dir);
    let prev = previous_file(state_dir);
    let tmp = state_dir.join("state.bin.tmp");
    let bytes = encode(state).map_err(|message| SlurmError::State {
        file: path.display().to_string(),
        message,
    })?;
    let io = |what: &str, e| SlurmError::io(format!("{what} {}", tmp.display()), e);
    let written = private_file(&tmp)
        .map_err(|e| io("creating", e))
        .and_then(|mut f| {
            f.write_all(&bytes).map_err(|e| io("writing", e))?;
            f.sync_all().map_err(|e| io("syncing", e))
        });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if path.exists() {
        // The current state stays whole under its name until the rename
        // below: the previous one is a second link to it, not a move.
        let _ = std::fs::remove_file(&prev);
        if std::fs::hard_link(&path, &prev).is_err() {
            std::fs::copy(&path, &prev)
                .map_err(|e| SlurmError::io(format!("keeping {}", prev.display()), e))?;
        }
    }
    std::fs::rename(&tmp, &path)
        .map_err(|e| SlurmError::io(format!("renaming to {}", path.display()), e))?;
    std::fs::File::open(state_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| SlurmError::io(format!("syncing {}", state_dir.display()), e))
}

/// Reads the state, if there is one: the newest, or the previous one when
/// the newest is missing or corrupt (saying why in [`Loaded::fell_back`]).
/// Neither readable is an error naming both.
pub fn load(state_dir: &Path) -> Result<Option<Loaded>, SlurmError> {
    let read = |path: &Path| -> Result<Option<State>, String> {
        match std::fs::read(path) {
            Ok(bytes) => decode(&bytes).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read: {e}")),
        }
    };
    let (path, prev) = (state_file(state_dir), previous_file(state_dir));
    let newest = match read(&path) {
        Ok(Some(state)) => {
            return Ok(Some(Loaded {
                state,
                fell_back: None,
            }));
        }
        other => other,
    };
    let why = match &newest {
        Err(e) => format!("{} is corrupt ({e})", path.display()),
        Ok(_) => format!("{} is missing", path.display()),
    };
    match (newest, read(&prev)) {
        (_, Ok(Some(state))) => Ok(Some(Loaded {
            state,
            fell_back: Some(format!(
                "{why}; using the previous state {}",
                prev.display()
            )),
        })),
        (Ok(_), Ok(None)) => Ok(None),
        (Ok(_), Err(p)) => Err(SlurmError::State {
            file: prev.display().to_string(),
            message: p,
        }),
        (Err(n), p) => Err(SlurmError::State {
            file: path.display().to_string(),
            message: match p {
                Err(p) => format!("{n}; the previous state {} too: {p}", prev.display()),
                Ok(_) => format!("{n}; there is no previous state"),
            },
        }),
    }
}

/// Creates (or truncates) a file readable and writable by the daemon's
/// user only.
pub fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Opens a private file to append to it (created 0600).
fn private_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// The files of a state folder that hold users' data.
const PRIVATE_FILES: [&str; 5] = [
    "state.bin",
    "state.bin.prev",
    "launches.jsonl",
    "journal.jsonl",
    "modules",
];

/// Makes the state folder if it is missing (mode 0711: others may reach
/// the socket in it, not list it) and checks what is there: the folder
/// and its files must belong to the daemon's user, the folder must not be
/// writable by group or others (they could replace the state or the
/// socket); files readable by others are made private (each such change is
/// returned, to be logged).
pub fn prepare_folder(state_dir: &Path) -> Result<Vec<String>, SlurmError> {
    use std::os::unix::fs::DirBuilderExt;
    let me = super::identity::effective_uid();
    let perm = |path: &Path, message: String| SlurmError::Permissions {
        path: path.display().to_string(),
        message,
    };
    if !state_dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(state_dir)
            .map_err(|e| {
                SlurmError::io(format!("creating state folder {}", state_dir.display()), e)
            })?;
    }
    let meta = std::fs::metadata(state_dir)
        .map_err(|e| SlurmError::io(format!("reading {}", state_dir.display()), e))?;
    if meta.uid() != me {
        return Err(perm(
            state_dir,
            format!(
                "the state folder belongs to user {}, not to the daemon's user ({me}): \
                 whoever owns it can replace the state and the socket",
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(perm(
            state_dir,
            format!(
                "the state folder can be written by others (mode {:04o}): they could replace \
                 the state or the socket; `chmod 711 {}`",
                meta.mode() & 0o7777,
                state_dir.display()
            ),
        ));
    }
    check_parents(state_dir)?;
    let mut notes = Vec::new();
    for name in PRIVATE_FILES {
        let path = state_dir.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.uid() != me || meta.file_type().is_symlink() {
            return Err(perm(
                &path,
                format!(
                    "belongs to user {} (or is a link), not to the daemon's user ({me})",
                    meta.uid()
                ),
            ));
        }
        let private = if meta.is_dir() { 0o700 } else { 0o600 };
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(private))
                .map_err(|e| SlurmError::io(format!("making {} private", path.display()), e))?;
            notes.push(format!(
                "{} was readable by others (mode {:04o}); made private ({private:04o})",
                path.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(notes)
}

/// Checks every folder above the state folder as the module cache's are
/// checked (and as ssh checks its keys): each must belong to root or the
/// daemon's user and must not be writable by group or others, unless it
/// has the sticky bit (like `/tmp`): in a folder another user may write,
/// that user could move the state folder aside and put their own (and
/// their own socket) in its place.
pub fn check_parents(state_dir: &Path) -> Result<(), SlurmError> {
    let me = super::identity::effective_uid();
    let real = state_dir
        .canonicalize()
        .map_err(|e| SlurmError::io(format!("resolving {}", state_dir.display()), e))?;
    for above in real.ancestors().skip(1) {
        let meta = std::fs::metadata(above)
            .map_err(|e| SlurmError::io(format!("reading {}", above.display()), e))?;
        let (owner, mode) = (meta.uid(), meta.mode());
        let why = if owner != 0 && owner != me {
            format!("belongs to user {owner}, not to root or the daemon's user ({me})")
        } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            format!(
                "can be written by {} without the sticky bit (mode {:04o})",
                if mode & 0o002 != 0 {
                    "anyone"
                } else {
                    "its group"
                },
                mode & 0o7777
            )
        } else {
            continue;
        };
        return Err(SlurmError::Permissions {
            path: above.display().to_string(),
            message: format!(
                "the folder above the state folder {} {why}: whoever can write it can move \
                 the state folder aside and put their own state and socket in its place; \
                 put the state folder under folders only root (or the daemon's user) can write",
                state_dir.display()
            ),
        });
    }
    Ok(())
}

/// The journal of acknowledged changes in a state folder.
pub fn journal_file(state_dir: &Path) -> PathBuf {
    state_dir.join("journal.jsonl")
}

/// Appends `line` to the journal, synced: an error means it is not on
/// disk (and the change must not be acknowledged).
pub fn append_journal(state_dir: &Path, line: &JournalLine) -> Result<(), SlurmError> {
    let path = journal_file(state_dir);
    let text = serde_json::to_string(line).map_err(|e| SlurmError::State {
        file: path.display().to_string(),
        message: e.to_string(),
    })?;
    private_append(&path)
        .and_then(|mut f| {
            writeln!(f, "{text}")?;
            f.sync_data()
        })
        .map_err(|e| SlurmError::io(format!("appending to {}", path.display()), e))
}

/// Every readable line of the journal (a torn last line is skipped).
pub fn read_journal(state_dir: &Path) -> Vec<JournalLine> {
    std::fs::read_to_string(journal_file(state_dir))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Keeps only the journal lines after `seq` (those a state older than the
/// current one does not cover): the journal does not grow without bound.
pub fn trim_journal(state_dir: &Path, seq: u64) -> Result<(), SlurmError> {
    let path = journal_file(state_dir);
    let keep: Vec<String> = read_journal(state_dir)
        .iter()
        .filter(|l| l.seq > seq)
        .filter_map(|l| serde_json::to_string(l).ok())
        .collect();
    let tmp = state_dir.join("journal.jsonl.tmp");
    private_file(&tmp)
        .and_then(|mut f| {
            for l in &keep {
                writeln!(f, "{l}")?;
            }
            f.sync_data()
        })
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| SlurmError::io(format!("rewriting {}", path.display()), e))
}

/// What a fall-back to a state that covers the journal up to `seq` lost:
/// one sentence per acknowledged change after it.
pub fn lost_since(state_dir: &Path, seq: u64) -> Vec<String> {
    read_journal(state_dir)
        .into_iter()
        .filter(|l| l.seq > seq)
        .map(|l| {
            let job = l.job.map_or(String::new(), |j| format!(" job {j}"));
            format!(
                "{}{job} by {} ({}) at {} ms (journal line {})",
                l.what, l.user, l.detail, l.at_ms, l.seq
            )
        })
        .collect()
}

/// Where swapped-in modules are kept, by digest.
pub fn module_file(state_dir: &Path, digest: &str) -> PathBuf {
    state_dir.join("modules").join(format!("{digest}.wasm"))
}

/// Keeps a swapped-in module's bytes (private), returning its digest.
pub fn keep_module(state_dir: &Path, wasm: &[u8]) -> Result<String, SlurmError> {
    use std::os::unix::fs::DirBuilderExt;
    let digest: String = Sha256::digest(wasm)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = module_file(state_dir, &digest);
    let dir = state_dir.join("modules");
    let io = |e| SlurmError::io(format!("keeping module {}", path.display()), e);
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io)?;
    }
    if std::fs::read(&path).is_ok_and(|b| b == wasm) {
        return Ok(digest);
    }
    let tmp = path.with_extension("tmp");
    private_file(&tmp)
        .and_then(|mut f| {
            f.write_all(wasm)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(io)?;
    Ok(digest)
}

/// A kept module's bytes, if they are there and unchanged.
pub fn kept_module(state_dir: &Path, digest: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(module_file(state_dir, digest)).ok()?;
    let found: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (found == digest).then_some(bytes)
}

/// `n` random bytes as hex (from the kernel's generator).
pub fn random_hex(n: usize) -> Result<String, SlurmError> {
    use std::io::Read;
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| SlurmError::io("reading /dev/urandom", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gw-persist-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn state(next_id: u64) -> State {
        State {
            version: STATE_VERSION,
            next_id,
            jobs: vec![JobEntry {
                id: 3,
                cmd: vec!["train".into(), "--epochs".into(), "10".into()],
                launch: Some(Launch {
                    slurm_id: None,
                    number: 1,
                    ..Launch::default()
                }),
                ..JobEntry::default()
            }],
            ..State::default()
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let dir = folder("trip");
        assert_eq!(load(&dir).unwrap(), None);
        save(&dir, &state(7)).unwrap();
        assert_eq!(load(&dir).unwrap().unwrap().state, state(7));
        std::fs::write(state_file(&dir), b"junk").unwrap();
        std::fs::remove_file(previous_file(&dir)).ok();
        let e = load(&dir).unwrap_err();
        assert!(
            e.to_string().contains("not a gangway-slurm state file"),
            "{e}"
        );
        std::fs::write(state_file(&dir), b"").unwrap();
        assert!(load(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_flipped_byte_is_caught_and_the_previous_state_used() {
        let dir = folder("flip");
        save(&dir, &state(7)).unwrap();
        save(&dir, &state(8)).unwrap();
        let mut bytes = std::fs::read(state_file(&dir)).unwrap();
        // A byte inside the job's command.
        let at = bytes.windows(6).position(|w| w == b"epochs").unwrap();
        bytes[at] ^= 0x01;
        std::fs::write(state_file(&dir), &bytes).unwrap();
        assert!(decode(&bytes).unwrap_err().contains("checksum mismatch"));
        let loaded = load(&dir).unwrap().unwrap();
        assert_eq!(
            loaded.state,
            state(7),
            "the previous state, not a changed one"
        );
        let why = loaded.fell_back.unwrap();
        assert!(
            why.contains("corrupt") && why.contains("state.bin.prev"),
            "{why}"
        );
        // Both corrupt: refused, naming both.
        std::fs::write(previous_file(&dir), b"GWSLURMx").unwrap();
        let e = load(&dir).unwrap_err().to_string();
        assert!(
            e.contains("checksum") && e.contains("previous state"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn old_job(attempt: u32, slurm_id: Option<u64>) -> JobEntryV2 {
        JobEntryV2 {
            id: 3,
            vc: "a".into(),
            user: "u".into(),
            gpus: 2,
            cmd: vec!["train".into()],
            cwd: "/w".into(),
            submitted_ms: 5,
            attempts: attempt,
            launch: Some(LaunchV2 {
                slurm_id,
                attempt,
                launched_ms: 6,
                placement: vec![("n1".into(), vec![0, 1])],
                running: slurm_id.is_some(),
            }),
            last_placement: Vec::new(),
            first_running_ms: None,
            ended_ms: None,
            final_state: None,
            wait_s: Vec::new(),
            events: vec!["submitted".into()],
        }
    }

    #[test]
    fn version_1_and_2_files_are_read() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend(
            postcard::to_allocvec(&StateV1 {
                version: 1,
                scheduler: b"s".to_vec(),
                next_id: 9,
                users: vec!["u".into()],
                jobs: vec![old_job(1, None)],
                history: Vec::new(),
            })
            .unwrap(),
        );
        let s = decode(&bytes).unwrap();
        assert_eq!((s.next_id, s.jobs.len()), (9, 1));
        let v2 = StateV2 {
            version: 2,
            scheduler: b"s".to_vec(),
            next_id: 4,
            users: Vec::new(),
            jobs: vec![old_job(2, Some(77))],
            history: vec![old_job(1, None)],
            uncounted: [(3, 1)].into(),
        };
        let body = postcard::to_allocvec(&v2).unwrap();
        let mut bytes = MAGIC.to_vec();
        bytes.extend(postcard::to_allocvec(&2u32).unwrap());
        bytes.extend_from_slice(&Sha256::digest(&body));
        bytes.extend(body);
        let s = decode(&bytes).unwrap();
        let launch = s.jobs[0].launch.clone().unwrap();
        assert_eq!((launch.number, launch.slurm_id), (2, Some(77)));
        assert!(
            launch.verified && launch.taken,
            "a v2 launch with an id was trusted"
        );
        assert_eq!((s.jobs[0].launches, s.jobs[0].attempts), (2, 2));
        assert_eq!(s.uncounted.get(&3), Some(&1));
        assert_eq!(s.history.len(), 1);
    }

    #[test]
    fn the_folder_and_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = folder("private").join("state");
        assert!(prepare_folder(&dir).unwrap().is_empty());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&dir), 0o711);
        save(&dir, &state(1)).unwrap();
        save(&dir, &state(2)).unwrap();
        assert_eq!(mode(&state_file(&dir)), 0o600);
        assert_eq!(mode(&previous_file(&dir)), 0o600);
        std::fs::set_permissions(state_file(&dir), std::fs::Permissions::from_mode(0o644)).unwrap();
        let notes = prepare_folder(&dir).unwrap();
        assert!(notes[0].contains("made private"), "{notes:?}");
        assert_eq!(mode(&state_file(&dir)), 0o600);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare_folder(&dir).unwrap_err().to_string();
        assert!(e.contains("can be written by others"), "{e}");
        // A folder above it that others may write, without the sticky bit.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        let parent = dir.parent().unwrap();
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare_folder(&dir).unwrap_err().to_string();
        assert!(e.contains("the folder above the state folder"), "{e}");
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(
            prepare_folder(&dir).is_ok(),
            "a sticky folder above is fine"
        );
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn the_journal_says_what_a_fall_back_lost() {
        let dir = folder("journal");
        for (seq, job) in [(1, 4), (2, 5), (3, 6)] {
            let line = JournalLine {
                seq,
                at_ms: 10,
                what: "submit".into(),
                job: Some(job),
                user: "alice".into(),
                detail: "vc prod, 2 GPUs".into(),
            };
            append_journal(&dir, &line).unwrap();
        }
        let lost = lost_since(&dir, 1);
        assert_eq!(lost.len(), 2);
        assert!(
            lost[0].contains("submit job 5 by alice (vc prod, 2 GPUs)"),
            "{lost:?}"
        );
        trim_journal(&dir, 2).unwrap();
        assert_eq!(read_journal(&dir).len(), 1);
        let digest = keep_module(&dir, b"\0asm module").unwrap();
        assert_eq!(kept_module(&dir, &digest).unwrap(), b"\0asm module");
        assert!(kept_module(&dir, "00").is_none());
        assert_eq!(random_hex(8).unwrap().len(), 16);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
