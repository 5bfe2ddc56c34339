//! The daemon's state on disk: saving, the journal of acknowledged
//! changes, recovering (and saying what a fall-back lost), the ends folder
//! and its records, the launch log.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;

use gangway_core::JobId;

use super::records::{self, RECORD_PATIENCE, RecordKey, RecordQuery, RecordRead, RecordWork};
use super::{Daemon, push_event, unix_ms};
use crate::SlurmError;
use crate::config::Config;
use crate::engine::NodeGpus;
use crate::persist::{self, JournalLine, Launch, STATE_VERSION, SlotChange, State};
use crate::policies;

/// An end record as far as the daemon knows it yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Recorded {
    /// Read: the job's exit status, or none (missing, refused, unreadable).
    Known(Option<i64>),
    /// Asked of the record reader; decide at a later cycle.
    Waiting,
}

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

/// Checks the shared ends folder when the configuration names one
/// (`ends_dir`; by default each user's records go to their home, see
/// [`super::records`], and there is nothing to check): the daemon's
/// user's, not writable by others (0711), so that only the daemon creates
/// names in it (each user's records go into a folder of their own it
/// makes). A folder others may write is refused (a user could take or
/// fill another's place). Also notes when the folder shares a filesystem
/// with the state: a user filling it would then stop every change from
/// being saved. Returns notes for `status`.
pub(super) fn prepare_ends_dir(cfg: &Config) -> Result<Vec<String>, SlurmError> {
    let Some(dir) = cfg.ends_dir.clone() else {
        return Ok(Vec::new());
    };
    let mut notes = Vec::new();
    let mode_of = |m: &std::fs::Metadata| m.mode() & 0o7777;
    let Ok(meta) = std::fs::metadata(&dir) else {
        return Ok(vec![format!(
            "the ends folder {} does not exist here: jobs must be able to write it from the nodes",
            dir.display()
        )]);
    };
    let me = crate::identity::effective_uid();
    if !meta.is_dir() || (meta.uid() != me && meta.uid() != 0) || meta.mode() & 0o022 != 0 {
        return Err(SlurmError::Permissions {
            path: dir.display().to_string(),
            message: format!(
                "the ends folder must be a folder of the daemon's user that only it can write \
                 (it is owner {}, mode {:04o}): a user who can create names in it could take or \
                 fill another's records; `chown` it to uid {me} and `chmod 711` it",
                meta.uid(),
                mode_of(&meta)
            ),
        });
    }
    if std::fs::metadata(&cfg.state_dir).is_ok_and(|s| s.dev() == meta.dev()) {
        notes.push(format!(
            "the ends folder {} is on the state folder's filesystem: a user who fills it (their \
             records folder there is theirs to write) makes every change fail to save, so every \
             submit is refused (\"No space left on device\") until the space is freed; jobs \
             already running still record how they end (their records' space is reserved at \
             launch). Set ends_dir to a folder on another filesystem the nodes share (the \
             daemon's user's, mode 0711), give users a quota on this one, or leave ends_dir \
             unset (each user's records then go to their own home)",
            dir.display()
        ));
    }
    Ok(notes)
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

    /// Where `uid`'s end records go: `<ends_dir>/<uid>/` when the
    /// configuration names a shared `ends_dir`, else their home's
    /// `.gangway/ends/` (none for a user the system does not know, or
    /// without a home).
    pub(super) fn record_folder(&self, uid: u32) -> Option<records::RecordFolder> {
        if let Some(ends) = &self.cfg.ends_dir {
            return Some(records::RecordFolder::Shared(ends.clone()));
        }
        let user = crate::identity::user_by_uid(uid)?;
        let home = std::path::PathBuf::from(user.home);
        home.is_absolute()
            .then_some(records::RecordFolder::Home(home))
    }

    /// Where the record of launch `number` of job `id` is, the job's user
    /// and the launch's secret (none for a job submitted with sbatch, or a
    /// launch saved before records had secrets).
    fn record_query(&self, id: u64, number: u32) -> Option<RecordQuery> {
        let entry = self.jobs.get(&id)?;
        let token = entry.launch.as_ref().map(|l| l.token.clone())?;
        if entry.native.is_some() || token.is_empty() {
            return None;
        }
        Some(RecordQuery {
            key: (id, number),
            folder: self.record_folder(entry.uid)?,
            name: records::record_name(&token),
            uid: entry.uid,
            token,
        })
    }

    /// What the batch script of launch `number` of job `id` recorded on
    /// ending, as far as it is known yet: read on the record reader's
    /// thread (asked here the first time, answered by [`Daemon::on_records`]),
    /// so `Waiting` means "decide at a later cycle". A record that is not
    /// the job's own is said in the job's events and counts as none; a read
    /// that does not answer within [`RECORD_PATIENCE`] counts as none.
    pub(super) fn recorded_end(&mut self, id: u64, number: u32) -> Recorded {
        let key = (id, number);
        if let Some(read) = self.records.remove(&key) {
            self.records_asked.remove(&key);
            return self.recorded(id, read);
        }
        let Some(query) = self.record_query(id, number) else {
            return Recorded::Known(None);
        };
        let Some(reader) = &self.record_reader else {
            let read = records::read_query(&query);
            return self.recorded(id, read);
        };
        match self.records_asked.get(&key) {
            None => {
                if reader.send(RecordWork::Read(vec![query.clone()])).is_ok() {
                    self.records_asked.insert(key, Instant::now());
                    return Recorded::Waiting;
                }
                let read = records::read_query(&query);
                self.recorded(id, read)
            }
            Some(at) if at.elapsed() > RECORD_PATIENCE => {
                self.records_asked.remove(&key);
                let why = format!("no answer within {} s", RECORD_PATIENCE.as_secs());
                self.recorded(id, RecordRead::Unreadable(why))
            }
            Some(_) => Recorded::Waiting,
        }
    }

    /// A record read for job `id`: its status, or none (said in the job's
    /// events when something is there that is not its record).
    fn recorded(&mut self, id: u64, read: RecordRead) -> Recorded {
        let why = match read {
            RecordRead::Status(status) => return Recorded::Known(Some(status)),
            RecordRead::Missing => return Recorded::Known(None),
            RecordRead::Refused(why) => format!("an end record was refused: {why}"),
            RecordRead::Unreadable(why) => format!("its end record could not be read: {why}"),
        };
        tracing::warn!(job = id, "{why}");
        if let Some(e) = self.jobs.get_mut(&id)
            && !e.events.contains(&why)
        {
            push_event(e, why);
        }
        Recorded::Known(None)
    }

    /// End records read by the record reader.
    pub fn on_records(&mut self, read: Vec<(RecordKey, RecordRead)>) {
        for (key, r) in read {
            if self.records_asked.contains_key(&key) {
                self.records.insert(key, r);
            }
        }
    }

    /// Takes job `id`'s current launch away (it ended, or is taken back)
    /// and removes its end record, on the record reader's thread: read or
    /// not, it is of no use any more.
    pub(super) fn drop_launch(&mut self, id: u64) -> Option<Launch> {
        let number = self.jobs.get(&id)?.launch.as_ref()?.number;
        let query = self.record_query(id, number);
        let launch = self.jobs.get_mut(&id)?.launch.take();
        self.records.remove(&(id, number));
        self.records_asked.remove(&(id, number));
        if let Some(q) = query {
            let sent = self
                .record_reader
                .as_ref()
                .is_some_and(|r| r.send(RecordWork::Remove(q.clone())).is_ok());
            if !sent {
                records::remove_query(&q);
            }
        }
        launch
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
