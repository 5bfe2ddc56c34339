//! The daemon's saved state: `<state_dir>/state.bin`, rewritten (to a
//! temporary file, synced, then renamed over the old one, the folder
//! synced) after every change and before every batch of launches; the
//! state it replaces is kept as `state.bin.prev`. A submission is answered
//! only once it is saved this way.
//!
//! It holds the scheduler's snapshot ([`gangway_core::snapshot::Snapshot`], itself
//! versioned) and the daemon's own job table: each job's command, user,
//! times, events and current launch. A launch whose `sbatch` had not
//! answered when the state was written has no Slurm job id; on restart the
//! daemon looks for it in `squeue` by its comment before deciding it never
//! happened, so no job is started twice.
//!
//! Encoding (version 2): the 7 bytes `GWSLURM`, the format version as a
//! postcard varint ([`STATE_VERSION`]), the SHA-256 of the rest (32 bytes),
//! then [`State`] as postcard. A file whose digest does not match is
//! refused, and the previous state is used instead (the daemon says so); a
//! version 1 file (no digest) is still read.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::SlurmError;
use super::engine::NodeGpus;

/// The state format this build writes (it also reads version 1).
pub const STATE_VERSION: u32 = 2;

const MAGIC: &[u8; 7] = b"GWSLURM";

/// The current launch of a job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// Slurm's job id (`None` while `sbatch` has not answered).
    pub slurm_id: Option<u64>,
    /// Attempt number.
    pub attempt: u32,
    /// Unix milliseconds of the `sbatch` call.
    pub launched_ms: u64,
    /// Where Gangway placed it.
    pub placement: NodeGpus,
    /// Whether Slurm has been seen running it.
    pub running: bool,
}

/// One job as the daemon tracks it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEntry {
    /// Gangway's id.
    pub id: u64,
    /// Virtual cluster.
    pub vc: String,
    /// User.
    pub user: String,
    /// GPUs.
    pub gpus: u32,
    /// Command and arguments.
    pub cmd: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// Unix milliseconds of the submission.
    pub submitted_ms: u64,
    /// Launches so far.
    pub attempts: u32,
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
    /// Per live job, its launches that did not count against
    /// `max_attempts` (Slurm did not answer, or held it for resources).
    pub uncounted: std::collections::BTreeMap<u64, u32>,
}

/// [`State`] as version 1 wrote it.
#[derive(Deserialize)]
struct StateV1 {
    version: u32,
    scheduler: Vec<u8>,
    next_id: u64,
    users: Vec<String>,
    jobs: Vec<JobEntry>,
    history: Vec<JobEntry>,
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

/// Reads bytes written by [`encode`] (or by version 1).
pub fn decode(bytes: &[u8]) -> Result<State, String> {
    let body = bytes
        .strip_prefix(&MAGIC[..])
        .ok_or("not a gangway-slurm state file")?;
    let (version, rest) =
        postcard::take_from_bytes::<u32>(body).map_err(|e| format!("format version: {e}"))?;
    match version {
        1 => {
            let v1: StateV1 = postcard::from_bytes(body).map_err(|e| e.to_string())?;
            Ok(State {
                version: v1.version,
                scheduler: v1.scheduler,
                next_id: v1.next_id,
                users: v1.users,
                jobs: v1.jobs,
                history: v1.history,
                uncounted: Default::default(),
            })
        }
        STATE_VERSION => {
            let (digest, body) = rest
                .split_at_checked(32)
                .ok_or("shorter than its checksum")?;
            if Sha256::digest(body).as_slice() != digest {
                return Err(format!(
                    "checksum mismatch: {} bytes that are not what was written",
                    body.len()
                ));
            }
            let (state, tail) =
                postcard::take_from_bytes::<State>(body).map_err(|e| e.to_string())?;
            if !tail.is_empty() {
                return Err(format!("{} bytes after the state", tail.len()));
            }
            Ok(state)
        }
        v => Err(format!(
            "format version {v} is not supported (this build reads 1 and {STATE_VERSION})"
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
    let written = std::fs::File::create(&tmp)
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
                    attempt: 1,
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

    #[test]
    fn version_1_files_are_read() {
        #[derive(Serialize)]
        struct V1<'a> {
            version: u32,
            scheduler: &'a [u8],
            next_id: u64,
            users: Vec<String>,
            jobs: Vec<JobEntry>,
            history: Vec<JobEntry>,
        }
        let mut bytes = MAGIC.to_vec();
        bytes.extend(
            postcard::to_allocvec(&V1 {
                version: 1,
                scheduler: b"s",
                next_id: 9,
                users: vec!["u".into()],
                jobs: state(0).jobs,
                history: Vec::new(),
            })
            .unwrap(),
        );
        let s = decode(&bytes).unwrap();
        assert_eq!((s.next_id, s.jobs.len()), (9, 1));
    }
}
