//! The daemon's state on disk: saving, the journal of acknowledged
//! changes, recovering (and saying what a fall-back lost), the ends folder
//! and its records, the launch log.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use gangway_core::JobId;

use super::{Daemon, push_event, unix_ms};
use crate::SlurmError;
use crate::config::Config;
use crate::engine::NodeGpus;
use crate::launch;
use crate::persist::{self, JournalLine, STATE_VERSION, SlotChange, State};
use crate::policies;

/// A saved state as read back, and what the daemon must say of it.
#[derive(Debug, Default)]
pub(super) struct Recovered {
    /// The state (none on a first start).
    pub(super) state: Option<State>,
    /// How it was recovered, when not from the newest file: why, and which
    /// acknowledged changes the previous state lacks.
    pub(super) note: Option<String>,
    /// The lowest job id not yet given out, as far as the journal knows.
    pub(super) next_id_floor: u64,
}

/// Reads the saved state. After a fall-back to the previous state, the
/// note lists every acknowledged change the journal has after it (jobs
/// submitted, cancels, swaps): they are not in the queue and must be done
/// again; their ids are never given out again.
pub(super) fn recover(state_dir: &Path) -> Result<Recovered, SlurmError> {
    let Some(loaded) = persist::load(state_dir)? else {
        return Ok(Recovered::default());
    };
    let floor = persist::read_journal(state_dir)
        .iter()
        .filter_map(|l| l.job)
        .max()
        .map_or(0, |j| j.saturating_add(1));
    let note = loaded.fell_back.map(|why| {
        let lost = persist::lost_since(state_dir, loaded.state.seq);
        let journal = persist::journal_file(state_dir);
        let said = if lost.is_empty() {
            "no acknowledged change was lost".to_string()
        } else {
            format!(
                "LOST {} acknowledged change(s), not in the queue now (submit or redo them; \
                 `grep` the job ids in {} and the daemon's log): {}",
                lost.len(),
                journal.display(),
                lost.join("; ")
            )
        };
        let note = format!("{why}; {said}");
        tracing::error!("{note}");
        note
    });
    Ok(Recovered {
        state: Some(loaded.state),
        note,
        next_id_floor: floor,
    })
}

/// Makes the ends folder when it is the default one (`<state_dir>/ends`,
/// mode 1733: jobs, as their users, may create records there but not list,
/// remove or replace others'), and checks a configured one: a folder
/// anyone may write without the sticky bit would let a user remove or
/// replace another job's record, so it is refused. Returns notes for
/// `status`.
pub(super) fn prepare_ends_dir(cfg: &Config) -> Result<Vec<String>, SlurmError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = cfg.ends_dir();
    if cfg.ends_dir.is_none() && !dir.exists() {
        std::fs::DirBuilder::new()
            .mode(0o1733)
            .create(&dir)
            .map_err(|e| SlurmError::io(format!("creating {}", dir.display()), e))?;
        // The mode given to mkdir passes through the umask.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1733))
            .map_err(|e| SlurmError::io(format!("setting the mode of {}", dir.display()), e))?;
    }
    let Ok(meta) = std::fs::metadata(&dir) else {
        return Ok(vec![format!(
            "the ends folder {} does not exist here: jobs must be able to write it from the nodes",
            dir.display()
        )]);
    };
    let mode = meta.mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(SlurmError::Permissions {
            path: dir.display().to_string(),
            message: format!(
                "the ends folder can be written by others without the sticky bit (mode {:04o}): \
                 a user could remove or replace another job's end record; `chmod +t` it",
                mode & 0o7777
            ),
        });
    }
    Ok(Vec::new())
}

impl Daemon {
    /// Writes the state (see [`persist::save`]).
    pub(super) fn save(&mut self) -> Result<(), SlurmError> {
        let scheduler = self
            .sched
            .snapshot()
            .to_bytes()
            .map_err(|e| SlurmError::State {
                file: persist::state_file(&self.cfg.state_dir)
                    .display()
                    .to_string(),
                message: e.to_string(),
            })?;
        let state = State {
            version: STATE_VERSION,
            scheduler,
            next_id: self.next_id,
            users: self.users.clone(),
            jobs: self.jobs.values().cloned().collect(),
            history: self.history.iter().cloned().collect(),
            uncounted: self.uncounted.clone(),
            daemon_id: self.id.clone(),
            seq: self.seq,
            slot_changes: self.slot_changes.clone(),
        };
        persist::save(&self.cfg.state_dir, &state)?;
        self.dirty = false;
        self.trim_journal();
        Ok(())
    }

    /// Keeps the journal short: once it is over 1 MiB, only the lines the
    /// previous state lacks stay.
    fn trim_journal(&mut self) {
        let journal = persist::journal_file(&self.cfg.state_dir);
        if std::fs::metadata(&journal).is_ok_and(|m| m.len() > 1 << 20)
            && let Err(e) = persist::trim_journal(&self.cfg.state_dir, self.prev_seq)
        {
            tracing::warn!("{e}");
        }
        self.prev_seq = self.seq;
    }

    /// Makes an acknowledged change durable: journals it, then saves the
    /// state. An error means it must not be acknowledged (the caller takes
    /// the change back).
    pub(super) fn commit(
        &mut self,
        what: &str,
        job: Option<u64>,
        user: &str,
        detail: String,
    ) -> Result<(), SlurmError> {
        let line = JournalLine {
            seq: self.seq + 1,
            at_ms: unix_ms(),
            what: what.to_string(),
            job,
            user: user.to_string(),
            detail,
        };
        persist::append_journal(&self.cfg.state_dir, &line)?;
        self.seq += 1;
        self.dirty = true;
        if let Err(e) = self.save() {
            self.last_error = Some(e.to_string());
            return Err(e);
        }
        Ok(())
    }

    /// Stages again, after a restart, the swaps and rollbacks it had
    /// acknowledged, in order. A module whose kept copy is gone or changed
    /// is skipped and said in `status`.
    pub(super) fn replay_slot_changes(&mut self) {
        for (slot_name, change) in self.slot_changes.clone() {
            let slot = match policies::slot_named(&slot_name) {
                Ok(s) => s,
                Err(e) => {
                    self.warnings.push(e.to_string());
                    continue;
                }
            };
            let done = match &change {
                SlotChange::Rollback => {
                    self.policies.rollback(slot);
                    Ok(String::new())
                }
                SlotChange::Swap {
                    name,
                    digest,
                    config,
                } => persist::kept_module(&self.cfg.state_dir, digest)
                    .ok_or_else(|| {
                        SlurmError::Policy(format!(
                            "{name} ({}) is missing or changed",
                            persist::module_file(&self.cfg.state_dir, digest).display()
                        ))
                    })
                    .and_then(|wasm| self.policies.swap(slot, name, &wasm, config)),
            };
            if let Err(e) = done {
                let why = format!("a swap acknowledged before the restart is not in force: {e}");
                tracing::error!("{why}");
                self.warnings.push(why);
            }
        }
    }

    /// Applies again, after a restart, the cancels it acknowledged that the
    /// saved scheduler had not yet applied.
    pub(super) fn apply_saved_cancels(&mut self) {
        let pending: Vec<u64> = self
            .jobs
            .values()
            .filter(|e| e.cancel.is_some())
            .map(|e| e.id)
            .collect();
        let now = self.now_s();
        for id in pending {
            let alive = self
                .sched
                .job(JobId(id))
                .is_some_and(|j| j.final_status().is_none());
            if alive {
                self.cancel_launch(id);
                let _ = self.sched.kill(JobId(id), now);
                if let Some(e) = self.jobs.get_mut(&id) {
                    push_event(e, "cancel applied after a restart".into());
                }
                self.dirty = true;
            }
        }
    }

    /// What the batch script of launch `number` of job `id` recorded on
    /// ending: its exit status, if a record exists that is the job's own
    /// (the file belongs to the job's user and repeats the launch's
    /// secret). A record that is not is ignored and said in the job's
    /// events: someone else wrote it.
    pub(super) fn recorded_end(&mut self, id: u64, number: u32) -> Option<i64> {
        let path = self
            .cfg
            .ends_dir()
            .join(launch::end_record(&self.id, id, number));
        let file = std::fs::File::open(&path).ok()?;
        let entry = self.jobs.get(&id)?;
        let token = entry
            .launch
            .as_ref()
            .map_or("", |l| l.token.as_str())
            .to_string();
        let checked = read_record(file, entry.uid, &token);
        match checked {
            Ok(status) => Some(status),
            Err(why) => {
                let text = format!("an end record was refused ({}): {why}", path.display());
                tracing::warn!(job = id, "{text}");
                if let Some(e) = self.jobs.get_mut(&id)
                    && !e.events.contains(&text)
                {
                    push_event(e, text);
                }
                None
            }
        }
    }

    /// Removes the end records of job `id`'s launches.
    pub(super) fn remove_end_records(&self, id: u64, launches: u32) {
        for n in 1..=launches {
            let _ = std::fs::remove_file(
                self.cfg
                    .ends_dir()
                    .join(launch::end_record(&self.id, id, n)),
            );
        }
    }

    /// Appends one line to `<state_dir>/launches.jsonl` (private): what was
    /// launched where, for operators and the end-to-end test. Every launch
    /// Slurm ran has its line: one whose `sbatch` answered after the daemon
    /// stopped is logged when the restarted daemon finds it in Slurm.
    pub(super) fn log_launch(&self, id: u64, number: u32, gid: u64, placement: &NodeGpus) {
        let line = serde_json::json!({
            "job": id,
            "attempt": number,
            "slurm_job": gid,
            "placement": placement,
            "at_ms": unix_ms(),
        });
        let path = self.cfg.state_dir.join("launches.jsonl");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| {
                f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
                writeln!(f, "{line}")
            });
        if let Err(e) = written {
            tracing::warn!("{}: {e}", path.display());
        }
    }
}

/// An end record's exit status if the open `file` belongs to `uid` and
/// repeats `token` (a launch saved before tokens existed has none).
fn read_record(mut file: std::fs::File, uid: u32, token: &str) -> Result<i64, String> {
    use std::io::Read;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if meta.uid() != uid {
        return Err(format!(
            "it belongs to uid {}, not to the job's user (uid {uid})",
            meta.uid()
        ));
    }
    let mut text = String::new();
    std::io::Read::by_ref(&mut file)
        .take(4096)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    let (status, secret) =
        launch::parse_end_record(&text).ok_or_else(|| format!("cannot read {text:?}"))?;
    if secret != token {
        return Err("it does not carry the launch's secret".into());
    }
    Ok(status)
}
