//! The daemon's saved state: `<state_dir>/state.bin`, rewritten (to a
//! temporary file, synced, then renamed over the old one) after every cycle
//! that changed something, and before every batch of launches.
//!
//! It holds the scheduler's snapshot ([`gangway_core::snapshot::Snapshot`], itself
//! versioned) and the daemon's own job table: each job's command, user,
//! times, events and current launch. A launch whose `sbatch` had not
//! answered when the state was written has no Slurm job id; on restart the
//! daemon looks for it in `squeue` by its comment before deciding it never
//! happened, so no job is started twice.
//!
//! Encoding: the 7 bytes `GWSLURM`, then [`State`] as postcard, whose first
//! field is the format version ([`STATE_VERSION`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::SlurmError;
use super::engine::NodeGpus;

/// The state format this build writes and reads.
pub const STATE_VERSION: u32 = 1;

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
}

/// The state file in a state folder.
pub fn state_file(state_dir: &Path) -> PathBuf {
    state_dir.join("state.bin")
}

/// Writes the state atomically.
pub fn save(state_dir: &Path, state: &State) -> Result<(), SlurmError> {
    let path = state_file(state_dir);
    let tmp = state_dir.join("state.bin.tmp");
    let mut bytes = MAGIC.to_vec();
    bytes.extend(postcard::to_allocvec(state).map_err(|e| SlurmError::State {
        file: path.display().to_string(),
        message: e.to_string(),
    })?);
    let io = |e| SlurmError::io(format!("writing {}", tmp.display()), e);
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, &path)
        .map_err(|e| SlurmError::io(format!("renaming to {}", path.display()), e))
}

/// Reads the state, if there is one.
pub fn load(state_dir: &Path) -> Result<Option<State>, SlurmError> {
    let path = state_file(state_dir);
    let file = path.display().to_string();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SlurmError::io(format!("reading {file}"), e)),
    };
    let err = |message: String| SlurmError::State {
        file: file.clone(),
        message,
    };
    let body = bytes
        .strip_prefix(&MAGIC[..])
        .ok_or_else(|| err("not a gangway-slurm state file".into()))?;
    let (version, _) =
        postcard::take_from_bytes::<u32>(body).map_err(|e| err(format!("format version: {e}")))?;
    if version != STATE_VERSION {
        return Err(err(format!(
            "format version {version} is not supported (this build reads {STATE_VERSION})"
        )));
    }
    let state: State = postcard::from_bytes(body).map_err(|e| err(e.to_string()))?;
    Ok(Some(state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let dir = std::env::temp_dir().join(format!("gw-persist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(load(&dir).unwrap(), None);
        let state = State {
            version: STATE_VERSION,
            next_id: 7,
            jobs: vec![JobEntry {
                id: 3,
                launch: Some(Launch {
                    slurm_id: None,
                    attempt: 1,
                    ..Launch::default()
                }),
                ..JobEntry::default()
            }],
            ..State::default()
        };
        save(&dir, &state).unwrap();
        assert_eq!(load(&dir).unwrap(), Some(state));
        std::fs::write(state_file(&dir), b"junk").unwrap();
        let e = load(&dir).unwrap_err();
        assert!(
            e.to_string().contains("not a gangway-slurm state file"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
