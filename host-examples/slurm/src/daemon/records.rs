//! End records: how a job ended, written by its batch script (as its user)
//! for the day the daemon was away longer than Slurm remembers ended jobs.
//!
//! No user can block, fill or take another's records:
//!
//! * each user's records live in a folder of their own,
//!   `<ends_dir>/<uid>/`, which the daemon makes before the user's first
//!   launch (owned by the user, mode 0700) inside an `ends_dir` only the
//!   daemon's user may write (0711): another user can neither create a
//!   name there nor list or fill it;
//! * a record's name is derived from its launch's secret
//!   ([`record_name`]), so it cannot be guessed from what `squeue` shows;
//! * the daemon reads records on a thread of its own ([`spawn_reader`]),
//!   never on the thread that schedules, and opens each without following
//!   a link and without blocking (`O_NOFOLLOW | O_NONBLOCK`): only a
//!   regular file of at most [`MAX_RECORD`] bytes, owned by the job's
//!   user and repeating the launch's secret, counts ([`read_record`]).
//!   A FIFO, a link, a folder or an oversized file in its place is refused
//!   and said in the job's events; a read that does not answer (a hung
//!   filesystem) is given up after [`RECORD_PATIENCE`].
//!
//! * each record's place is reserved before its launch ([`reserve`]) and
//!   written over in place, so a job running when the filesystem fills
//!   still records how it ended: a user who fills it fails no one else's
//!   running job.
//!
//! What a user can still do: make their own jobs' records unreadable (the
//! job then ends "unknown" after an outage, not run again), and fill the
//! filesystem of `ends_dir` as they can any they write: launches made
//! while it is full get no reservation (their records may then be lost),
//! and when it is the state's, every change (every submit) is refused
//! until space is freed. So `ends_dir` should be on a filesystem of its own
//! (the daemon warns when it is the state's), or users given quotas there,
//! as on any shared filesystem.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// A record's job and launch number.
pub(super) type RecordKey = (u64, u32);

/// Largest record read, in bytes (one holds an exit status and a secret).
pub const MAX_RECORD: u64 = 4096;

/// A record's place, reserved before its launch ([`reserve`]): blanks the
/// batch script writes over in place, so that a record can be written
/// even once the filesystem is full. A record of blanks only is one not
/// written yet ([`RecordRead::Missing`]).
pub const RESERVED: [u8; 128] = {
    let mut b = [b' '; 128];
    b[127] = b'\n';
    b
};

/// Where a launch's end record goes: its user's folder in `ends`, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSpot {
    /// The ends folder.
    pub ends: PathBuf,
    /// The job's user and group (who owns their folder and records).
    pub uid: u32,
    /// The user's group.
    pub gid: u32,
    /// The record's file name ([`record_name`]).
    pub name: String,
}

/// How long the daemon waits for a record read before it gives up on it
/// (the job then ends as if it had none).
pub(super) const RECORD_PATIENCE: Duration = Duration::from_secs(30);

/// What reading a record found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordRead {
    /// The job's own record: its exit status.
    Status(i64),
    /// There is none.
    Missing,
    /// Something is there that is not the job's record, and why.
    Refused(String),
    /// It could not be read (an I/O error), and why.
    Unreadable(String),
}

/// What the record reader is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum RecordWork {
    /// Read these records.
    Read(Vec<RecordQuery>),
    /// Remove this record (its launch is over).
    Remove(PathBuf),
}

/// A record to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RecordQuery {
    /// Its job and launch.
    pub(super) key: RecordKey,
    /// Where it is.
    pub(super) path: PathBuf,
    /// The job's user.
    pub(super) uid: u32,
    /// The launch's secret, which it must repeat.
    pub(super) token: String,
}

/// The folder of `uid`'s records.
pub fn user_folder(ends_dir: &Path, uid: u32) -> PathBuf {
    ends_dir.join(uid.to_string())
}

/// The file name of the record of the launch whose secret is `token`: a
/// digest of the secret, so that the name tells nothing of it and cannot
/// be guessed by anyone who does not hold it.
pub fn record_name(token: &str) -> String {
    let digest = Sha256::digest(format!("gangway end record {token}").as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{hex}.exit")
}

/// Makes `uid`'s record folder in `ends_dir` if it is missing (owned by
/// `uid`:`gid`, 0700), or checks it: a folder (not a link) of that user
/// that no one else can write. Run on Slurm's I/O thread before the
/// user's launches (a hung `ends_dir` never stops the cycle).
pub fn prepare_user_folder(ends_dir: &Path, uid: u32, gid: u32) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = user_folder(ends_dir, uid);
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) => {
            if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
                return Err(format!(
                    "{} is not a folder of uid {uid} that only they can write (owner {}, \
                     mode {:04o}): no end record can be kept there",
                    dir.display(),
                    meta.uid(),
                    meta.mode() & 0o7777
                ));
            }
            Ok(dir)
        }
        Err(_) => {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| format!("making {}: {e}", dir.display()))?;
            if uid != crate::identity::effective_uid() {
                std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                    .map_err(|e| format!("giving {} to uid {uid}: {e}", dir.display()))?;
            }
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("setting the mode of {}: {e}", dir.display()))?;
            Ok(dir)
        }
    }
}

/// Makes `spot`'s user folder if it is missing ([`prepare_user_folder`])
/// and reserves the record's place in it: a new file of [`RESERVED`]
/// blanks, the user's, 0600, which the batch script overwrites in place
/// (needing no new space). So a job that is running when the filesystem
/// fills (another user's files on it, say) still records how it ended. An
/// error (the filesystem already full, a root-squashed folder) leaves no
/// file: the script then writes a new one, as without a reservation. Run
/// on Slurm's I/O thread before the launch.
pub fn reserve(spot: &RecordSpot) -> Result<(), String> {
    use std::io::Write;
    let dir = prepare_user_folder(&spot.ends, spot.uid, spot.gid)?;
    let path = dir.join(&spot.name);
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path);
    let mut file = match made {
        Ok(f) => f,
        // Reserved already (this launch, tried again).
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(format!("reserving {}: {e}", path.display())),
    };
    let mut done = file.write_all(&RESERVED);
    if done.is_ok() && spot.uid != crate::identity::effective_uid() {
        done = std::os::unix::fs::fchown(&file, Some(spot.uid), Some(spot.gid));
    }
    done.map_err(|e| {
        let _ = std::fs::remove_file(&path);
        format!("reserving {}: {e}", path.display())
    })
}

/// Reads the record at `path` of a job of `uid` whose launch's secret is
/// `token`: opened without following a link and without blocking; only a
/// regular file of at most [`MAX_RECORD`] bytes owned by `uid` and
/// repeating `token` counts.
pub fn read_record(path: &Path, uid: u32, token: &str) -> RecordRead {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    let mut file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return RecordRead::Missing,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return RecordRead::Refused("it is a symbolic link".into());
        }
        Err(e) => return RecordRead::Unreadable(e.to_string()),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return RecordRead::Unreadable(e.to_string()),
    };
    if !meta.file_type().is_file() {
        return RecordRead::Refused(
            "it is not a regular file (a FIFO, a device or a folder)".into(),
        );
    }
    if meta.uid() != uid {
        return RecordRead::Refused(format!(
            "it belongs to uid {}, not to the job's user (uid {uid})",
            meta.uid()
        ));
    }
    if meta.len() > MAX_RECORD {
        return RecordRead::Refused(format!(
            "it is {} bytes, over the {MAX_RECORD}-byte limit of a record",
            meta.len()
        ));
    }
    let mut text = String::new();
    if let Err(e) = (&mut file).take(MAX_RECORD).read_to_string(&mut text) {
        return RecordRead::Refused(format!("it cannot be read as text: {e}"));
    }
    if text.trim().is_empty() {
        // Reserved, never written.
        return RecordRead::Missing;
    }
    match crate::launch::parse_end_record(&text) {
        None => RecordRead::Refused(format!("cannot read {text:?}")),
        Some((_, secret)) if secret != token => {
            RecordRead::Refused("it does not carry the launch's secret".into())
        }
        Some((status, _)) => RecordRead::Status(status),
    }
}

/// What the reader does with what it read: `false` when no one listens
/// any more.
pub(super) type Answer = Box<dyn Fn(Vec<(RecordKey, RecordRead)>) -> bool + Send>;

/// Starts the record reader: reads each batch of queries it is sent and
/// gives what it read to `answer`, removes the records it is told to.
/// Returns where to send its work (if the thread cannot start, sends fail
/// and the daemon reads on its own thread).
pub(super) fn spawn_reader(answer: Answer) -> mpsc::Sender<RecordWork> {
    let (tx, rx) = mpsc::channel::<RecordWork>();
    let spawned = std::thread::Builder::new()
        .name("gangway-records".into())
        .spawn(move || {
            for work in rx {
                let batch = match work {
                    RecordWork::Read(batch) => batch,
                    RecordWork::Remove(path) => {
                        let _ = std::fs::remove_file(path);
                        continue;
                    }
                };
                let read = batch
                    .into_iter()
                    .map(|q| (q.key, read_record(&q.path, q.uid, &q.token)))
                    .collect();
                if !answer(read) {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("the record reader cannot start ({e}): records are read on the cycle");
    }
    tx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_small_regular_file_of_the_user_with_the_secret_counts() {
        let dir = std::env::temp_dir().join(format!("gw-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let me = crate::identity::effective_uid();
        let good = dir.join("good.exit");
        std::fs::write(&good, "3 s3cret\n").unwrap();
        assert_eq!(read_record(&good, me, "s3cret"), RecordRead::Status(3));
        assert!(
            matches!(read_record(&good, me, "other"), RecordRead::Refused(w) if w.contains("secret"))
        );
        assert!(
            matches!(read_record(&good, me + 1, "s3cret"), RecordRead::Refused(w) if w.contains("belongs to uid"))
        );
        assert_eq!(read_record(&dir.join("none"), me, "x"), RecordRead::Missing);
        let link = dir.join("link.exit");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(
            matches!(read_record(&link, me, "s3cret"), RecordRead::Refused(w) if w.contains("link"))
        );
        let big = dir.join("big.exit");
        std::fs::write(&big, vec![b'0'; 10_000]).unwrap();
        assert!(
            matches!(read_record(&big, me, "x"), RecordRead::Refused(w) if w.contains("over the"))
        );
        // A FIFO: opening it must not block.
        let fifo = dir.join("fifo.exit");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let t = std::time::Instant::now();
            assert!(
                matches!(read_record(&fifo, me, "x"), RecordRead::Refused(w) if w.contains("regular"))
            );
            assert!(t.elapsed() < Duration::from_secs(1));
        }
        assert!(matches!(read_record(&dir, me, "x"), RecordRead::Refused(_)));
        let blank = dir.join("blank.exit");
        std::fs::write(&blank, RESERVED).unwrap();
        assert_eq!(read_record(&blank, me, "x"), RecordRead::Missing);
        assert_eq!(record_name("a").len(), 37);
        assert_ne!(record_name("a"), record_name("b"));
        let folder = prepare_user_folder(&dir, me, 0).unwrap();
        assert_eq!(std::fs::metadata(&folder).unwrap().mode() & 0o777, 0o700);
        assert!(
            prepare_user_folder(&dir, me, 0).is_ok(),
            "an existing folder passes"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Runs the batch script of a launch whose command exits `code`, its
    /// record going to `dir`/`name`.
    fn run_script(dir: &Path, name: &str, code: i32) {
        let env = Vec::new();
        let cmd = vec!["sh".to_string(), "-c".to_string(), format!("exit {code}")];
        let spec = crate::launch::LaunchSpec {
            daemon: "d1",
            id: 1,
            number: 1,
            cmd: &cmd,
            cwd: "/",
            env: &env,
            partition: None,
            record_dir: dir,
            record_name: name,
            token: "tok",
        };
        let script = crate::launch::script(&spec, &[]);
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{out:?}");
    }

    #[test]
    fn a_reserved_record_is_written_in_place() {
        let ends = std::env::temp_dir().join(format!("gw-reserve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&ends);
        std::fs::create_dir_all(&ends).unwrap();
        let me = crate::identity::effective_uid();
        let spot = RecordSpot {
            ends: ends.clone(),
            uid: me,
            gid: 0,
            name: record_name("tok"),
        };
        reserve(&spot).unwrap();
        let folder = user_folder(&ends, me);
        let path = folder.join(&spot.name);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.len(), meta.mode() & 0o777), (128, 0o600));
        assert_eq!(read_record(&path, me, "tok"), RecordRead::Missing);
        // Reserved again (the launch tried again): kept as it is.
        reserve(&spot).unwrap();
        run_script(&folder, &spot.name, 3);
        let ino = meta.ino();
        let after = std::fs::metadata(&path).unwrap();
        assert_eq!((after.ino(), after.len()), (ino, 128), "written in place");
        assert_eq!(read_record(&path, me, "tok"), RecordRead::Status(3));
        // Without a reservation (it could not be made): a new record.
        let other = record_name("other");
        run_script(&folder, &other, 0);
        assert_eq!(
            read_record(&folder.join(&other), me, "tok"),
            RecordRead::Status(0)
        );
        // A link in place of the reservation is replaced, not followed.
        let target = ends.join("target");
        std::fs::write(&target, "keep").unwrap();
        let linked = folder.join(record_name("linked"));
        std::os::unix::fs::symlink(&target, &linked).unwrap();
        run_script(&folder, &record_name("linked"), 1);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert_eq!(read_record(&linked, me, "tok"), RecordRead::Status(1));
        std::fs::remove_dir_all(&ends).unwrap();
    }
}
