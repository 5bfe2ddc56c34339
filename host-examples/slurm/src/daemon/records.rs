//! End records: how a job ended, written by its batch script (as its user)
//! for the day the daemon was away longer than Slurm remembers ended jobs.
//!
//! No user can block, fill or take another's records:
//!
//! * each user's records live in a place of their own ([`RecordFolder`]):
//!   by default in their home, `~/.gangway/ends/` (on a Slurm cluster the
//!   home is shared with the nodes), made by the daemon before the user's
//!   first launch (the user's, 0700). So a user who fills the filesystem
//!   holding her records fills her own home: no other user's records, and
//!   not the daemon's state (whose every change is saved before it is
//!   answered: a full state filesystem refuses every submit). A site that
//!   sets `ends_dir` gets a shared folder instead, `<ends_dir>/<uid>/`,
//!   inside an `ends_dir` only the daemon's user may write (0711): another
//!   user can neither create a name there nor list or fill it;
//! * a record's name is derived from its launch's secret
//!   ([`record_name`]), so it cannot be guessed from what `squeue` shows;
//! * the daemon reads records on a thread of its own ([`spawn_reader`]),
//!   never on the thread that schedules, and opens each without following
//!   a link and without blocking (`O_NOFOLLOW | O_NONBLOCK`): only a
//!   regular file of at most [`MAX_RECORD`] bytes, owned by the job's
//!   user and repeating the launch's secret, counts ([`read_record`]).
//!   In a home, every folder from the home down is opened the same way
//!   (`openat` one name at a time, no link followed) and must be the
//!   user's ([`open_home_records`]): a user who swaps a folder of hers for
//!   a link to someone else's cannot make the daemon (root) read, write or
//!   remove anything there. A FIFO, a link, a folder or an oversized file
//!   in a record's place is refused and said in the job's events; a read
//!   that does not answer (a hung filesystem) is given up after
//!   [`RECORD_PATIENCE`].
//! * each record's place is reserved before its launch ([`reserve`]) and
//!   written over in place, so a job running when the filesystem fills
//!   still records how it ended.
//!
//! What a user can still do: make their own jobs' records unreadable (the
//! job then ends "unknown" after an outage, not run again), and fill the
//! filesystem their records are on. In a home, that hurts their own jobs
//! only, and those launched while it is full only if the daemon is away
//! when they end (no reservation: their record may be lost). With a shared
//! `ends_dir`, it is everyone's: launches made while it is full get no
//! reservation, and when it is the state's, every change (every submit) is
//! refused until space is freed (the daemon warns).

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use rustix::fd::OwnedFd;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;
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

/// Where in a user's home their end records go (the default place).
pub const HOME_RECORDS: &str = ".gangway/ends";

/// Where one user's end records are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordFolder {
    /// `<ends_dir>/<uid>/`: the shared folder a site configured
    /// (`ends_dir`), the daemon's user's.
    Shared(PathBuf),
    /// `<home>/.gangway/ends/`: the user's own home (the default).
    Home(PathBuf),
}

impl RecordFolder {
    /// The folder of `uid`'s records.
    pub fn path(&self, uid: u32) -> PathBuf {
        match self {
            RecordFolder::Shared(ends) => user_folder(ends, uid),
            RecordFolder::Home(home) => home.join(HOME_RECORDS),
        }
    }
}

/// Where a launch's end record goes: its user's folder, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSpot {
    /// The user's records folder.
    pub folder: RecordFolder,
    /// The job's user and group (who owns their folder and records).
    pub uid: u32,
    /// The user's group.
    pub gid: u32,
    /// The record's file name ([`record_name`]).
    pub name: String,
}

/// How long a reservation in a home may take before the launch goes on
/// without it (a hung home filesystem delays a launch, never stops them).
pub const RESERVE_PATIENCE: Duration = Duration::from_secs(2);

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
    Remove(RecordQuery),
}

/// A record to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RecordQuery {
    /// Its job and launch.
    pub(super) key: RecordKey,
    /// Its user's records folder.
    pub(super) folder: RecordFolder,
    /// Its file name there.
    pub(super) name: String,
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

/// Reserves `spot`'s place ([`RESERVED`] blanks, the user's, 0600),
/// making the user's folder first if it is missing: the batch script
/// overwrites it in place (needing no new space), so a job that is
/// running when the filesystem fills still records how it ended. An error
/// (the filesystem already full, a root-squashed home) leaves no file: the
/// script then writes a new one, as without a reservation. Run on Slurm's
/// I/O thread before the launch; in a home, given up after
/// [`RESERVE_PATIENCE`] (the work goes on on a thread of its own).
pub fn reserve(spot: &RecordSpot) -> Result<(), String> {
    match &spot.folder {
        RecordFolder::Shared(ends) => reserve_shared(ends, spot),
        RecordFolder::Home(_) => {
            let (tx, rx) = mpsc::channel();
            let owned = spot.clone();
            std::thread::Builder::new()
                .name("gangway-reserve".into())
                .spawn(move || {
                    let _ = tx.send(reserve_home(&owned));
                })
                .map_err(|e| format!("reserving a record: {e}"))?;
            rx.recv_timeout(RESERVE_PATIENCE).unwrap_or_else(|_| {
                Err(format!(
                    "reserving a record in {} took over {} s",
                    spot.folder.path(spot.uid).display(),
                    RESERVE_PATIENCE.as_secs()
                ))
            })
        }
    }
}

/// [`reserve`] in a shared `ends_dir`.
fn reserve_shared(ends: &Path, spot: &RecordSpot) -> Result<(), String> {
    let dir = prepare_user_folder(ends, spot.uid, spot.gid)?;
    let path = dir.join(&spot.name);
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path);
    match made {
        Ok(file) => fill_reservation(file, spot).map_err(|e| {
            let _ = std::fs::remove_file(&path);
            format!("reserving {}: {e}", path.display())
        }),
        // Reserved already (this launch, tried again).
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("reserving {}: {e}", path.display())),
    }
}

/// [`reserve`] in the user's home: the folder walked and made without
/// following a link ([`open_home_records`]), the file made in it.
fn reserve_home(spot: &RecordSpot) -> Result<(), String> {
    let RecordFolder::Home(home) = &spot.folder else {
        return Err("not a home".into());
    };
    let path = spot.folder.path(spot.uid).join(&spot.name);
    let dir = open_home_records(home, spot.uid, spot.gid, true).map_err(|e| e.to_string())?;
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::EXCL
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::NOCTTY
        | OFlags::CLOEXEC;
    match rfs::openat(&dir, spot.name.as_str(), flags, Mode::from_raw_mode(0o600)) {
        Ok(fd) => fill_reservation(std::fs::File::from(fd), spot).map_err(|e| {
            let _ = rfs::unlinkat(&dir, spot.name.as_str(), AtFlags::empty());
            format!("reserving {}: {e}", path.display())
        }),
        Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(format!("reserving {}: {e}", path.display())),
    }
}

/// Writes the blanks of a new reservation and gives it to its user.
fn fill_reservation(mut file: std::fs::File, spot: &RecordSpot) -> std::io::Result<()> {
    use std::io::Write;
    file.write_all(&RESERVED)?;
    if spot.uid != crate::identity::effective_uid() {
        std::os::unix::fs::fchown(&file, Some(spot.uid), Some(spot.gid))?;
    }
    Ok(())
}

/// Why a user's records folder in their home cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// It (or the home) does not exist.
    #[error("{0} does not exist")]
    Missing(String),
    /// It is not a folder of the user's that only they can write.
    #[error("{0}")]
    Refused(String),
    /// An I/O error.
    #[error("{0}")]
    Io(String),
}

impl From<FolderError> for RecordRead {
    fn from(e: FolderError) -> RecordRead {
        match e {
            FolderError::Missing(_) => RecordRead::Missing,
            FolderError::Refused(why) => RecordRead::Refused(why),
            FolderError::Io(why) => RecordRead::Unreadable(why),
        }
    }
}

/// Flags of a folder opened on the way to a user's records.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NONBLOCK);

/// What opening `path` (a folder on the way to records) failed with.
fn folder_error(e: Errno, path: &Path) -> FolderError {
    match e {
        Errno::NOENT => FolderError::Missing(path.display().to_string()),
        Errno::LOOP | Errno::NOTDIR => FolderError::Refused(format!(
            "{} is a symbolic link or not a folder",
            path.display()
        )),
        e => FolderError::Io(format!("opening {}: {e}", path.display())),
    }
}

/// Checks that the folder open as `fd` (at `path`) belongs to `uid` and,
/// when `private`, that no one else can write it.
fn check_owner(fd: &OwnedFd, uid: u32, path: &Path, private: bool) -> Result<(), FolderError> {
    let st = rfs::fstat(fd).map_err(|e| FolderError::Io(format!("{}: {e}", path.display())))?;
    if st.st_uid != uid {
        return Err(FolderError::Refused(format!(
            "{} belongs to uid {}, not to the job's user (uid {uid})",
            path.display(),
            st.st_uid
        )));
    }
    if private && st.st_mode & 0o022 != 0 {
        return Err(FolderError::Refused(format!(
            "{} can be written by others (mode {:04o})",
            path.display(),
            st.st_mode & 0o7777
        )));
    }
    Ok(())
}

/// Opens `uid`'s records folder in their home `home`
/// (`<home>/.gangway/ends`) one folder at a time: the home as the system
/// names it (it must be the user's), then `.gangway` and `ends` each
/// opened in the one before without following a link and checked to be
/// the user's and written by no one else. With `make`, a missing one is
/// made (0700) and given to the user. So whatever the user puts in their
/// home (a link to another's folder, say), the daemon reaches only their
/// own files.
pub fn open_home_records(
    home: &Path,
    uid: u32,
    gid: u32,
    make: bool,
) -> Result<OwnedFd, FolderError> {
    let mut path = home.to_path_buf();
    let mut dir = rfs::open(home, DIR_FLAGS, Mode::empty()).map_err(|e| folder_error(e, home))?;
    check_owner(&dir, uid, home, false)?;
    for name in HOME_RECORDS.split('/') {
        path.push(name);
        let next = match rfs::openat(&dir, name, DIR_FLAGS | OFlags::NOFOLLOW, Mode::empty()) {
            Err(Errno::NOENT) if make => make_folder(&dir, name, uid, gid, &path)?,
            opened => opened.map_err(|e| folder_error(e, &path))?,
        };
        check_owner(&next, uid, &path, true)?;
        dir = next;
    }
    Ok(dir)
}

/// Makes folder `name` in `parent` (at `path`), 0700, and gives it to
/// `uid`:`gid`; one made meanwhile by someone else is opened as it is
/// (and checked by the caller).
fn make_folder(
    parent: &OwnedFd,
    name: &str,
    uid: u32,
    gid: u32,
    path: &Path,
) -> Result<OwnedFd, FolderError> {
    let made = match rfs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
        Ok(()) => true,
        Err(Errno::EXIST) => false,
        Err(e) => return Err(FolderError::Io(format!("making {}: {e}", path.display()))),
    };
    let fd = rfs::openat(parent, name, DIR_FLAGS | OFlags::NOFOLLOW, Mode::empty())
        .map_err(|e| folder_error(e, path))?;
    let me = crate::identity::effective_uid();
    if made && uid != me {
        let io = |e: Errno| FolderError::Io(format!("giving {} to uid {uid}: {e}", path.display()));
        let st = rfs::fstat(&fd).map_err(io)?;
        if st.st_uid == me {
            rfs::fchown(
                &fd,
                Some(rfs::Uid::from_raw(uid)),
                Some(rfs::Gid::from_raw(gid)),
            )
            .map_err(io)?;
        }
    }
    Ok(fd)
}

/// Reads the record `q` asks for ([`read_record`]); in a home, through
/// [`open_home_records`].
pub(super) fn read_query(q: &RecordQuery) -> RecordRead {
    match &q.folder {
        RecordFolder::Shared(_) => {
            read_record(&q.folder.path(q.uid).join(&q.name), q.uid, &q.token)
        }
        RecordFolder::Home(home) => {
            let dir = match open_home_records(home, q.uid, q.uid, false) {
                Ok(dir) => dir,
                Err(e) => return e.into(),
            };
            let opened = rfs::openat(&dir, q.name.as_str(), READ_FLAGS, Mode::empty())
                .map(std::fs::File::from)
                .map_err(std::io::Error::from);
            read_opened(opened, q.uid, &q.token)
        }
    }
}

/// Removes the record `q` names (its launch is over); in a home, through
/// [`open_home_records`].
pub(super) fn remove_query(q: &RecordQuery) {
    match &q.folder {
        RecordFolder::Shared(_) => {
            let _ = std::fs::remove_file(q.folder.path(q.uid).join(&q.name));
        }
        RecordFolder::Home(home) => {
            if let Ok(dir) = open_home_records(home, q.uid, q.uid, false) {
                let _ = rfs::unlinkat(&dir, q.name.as_str(), AtFlags::empty());
            }
        }
    }
}

/// Flags a record is opened with: no link followed, no waiting on a FIFO
/// or a device.
const READ_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// Reads the record at `path` of a job of `uid` whose launch's secret is
/// `token`: opened without following a link and without blocking; only a
/// regular file of at most [`MAX_RECORD`] bytes owned by `uid` and
/// repeating `token` counts.
pub fn read_record(path: &Path, uid: u32, token: &str) -> RecordRead {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    read_opened(opened, uid, token)
}

/// [`read_record`] of a record already opened (or not).
fn read_opened(opened: std::io::Result<std::fs::File>, uid: u32, token: &str) -> RecordRead {
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
                    RecordWork::Remove(q) => {
                        remove_query(&q);
                        continue;
                    }
                };
                let read = batch.into_iter().map(|q| (q.key, read_query(&q))).collect();
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
            record_dir: Some(dir),
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
            folder: RecordFolder::Shared(ends.clone()),
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

    #[test]
    fn records_in_a_home_are_reached_without_following_links() {
        let home = std::env::temp_dir().join(format!("gw-home-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).unwrap();
        let me = crate::identity::effective_uid();
        let folder = RecordFolder::Home(home.clone());
        let spot = RecordSpot {
            folder: folder.clone(),
            uid: me,
            gid: 0,
            name: record_name("tok"),
        };
        let query = RecordQuery {
            key: (1, 1),
            folder: folder.clone(),
            name: spot.name.clone(),
            uid: me,
            token: "tok".into(),
        };
        // No folder yet: no record; the reservation makes it, 0700.
        assert_eq!(read_query(&query), RecordRead::Missing);
        reserve(&spot).unwrap();
        let dir = folder.path(me);
        assert_eq!(dir, home.join(".gangway/ends"));
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(read_query(&query), RecordRead::Missing);
        run_script(&dir, &spot.name, 4);
        assert_eq!(read_query(&query), RecordRead::Status(4));
        // Another user's home is refused.
        let other = RecordQuery {
            uid: me + 1,
            ..query.clone()
        };
        assert!(
            matches!(read_query(&other), RecordRead::Refused(w) if w.contains("belongs to uid")),
            "{:?}",
            read_query(&other)
        );
        // `.gangway` swapped for a link to a folder with a record of the
        // same name: refused, and neither read, written nor removed.
        let elsewhere = home.join("elsewhere");
        std::fs::rename(home.join(".gangway"), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, home.join(".gangway")).unwrap();
        assert!(
            matches!(read_query(&query), RecordRead::Refused(w) if w.contains("symbolic link")),
            "{:?}",
            read_query(&query)
        );
        assert!(
            reserve(&RecordSpot {
                name: record_name("new"),
                ..spot.clone()
            })
            .unwrap_err()
            .contains("symbolic link")
        );
        remove_query(&query);
        assert!(elsewhere.join("ends").join(&spot.name).exists());
        // A folder others can write is refused.
        std::fs::remove_file(home.join(".gangway")).unwrap();
        std::fs::rename(&elsewhere, home.join(".gangway")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            matches!(read_query(&query), RecordRead::Refused(w) if w.contains("written by others")),
            "{:?}",
            read_query(&query)
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        remove_query(&query);
        assert_eq!(read_query(&query), RecordRead::Missing);
        std::fs::remove_dir_all(&home).unwrap();
    }
}
