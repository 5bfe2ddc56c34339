//! Compiled code kept on disk across processes, so a run does not compile
//! again the modules an earlier run compiled.
//!
//! Each entry is one file in the cache folder, named by a SHA-256 key over
//! the kind of code (component or core module), the engine's compatibility
//! hash (wasmtime's version and every setting that changes compiled code)
//! and the module's bytes. The file holds a magic number, the SHA-256 of
//! the module's bytes it was compiled from, the SHA-256 of the compiled
//! artifact and the artifact. An entry is used only for the module it
//! names (an entry copied under another module's name is that other
//! module's code: it is compiled again), if its magic and digest check out
//! and wasmtime accepts it for this engine; anything else (a corrupt,
//! truncated or foreign file, or one of the earlier format that named no
//! module) is compiled again and the entry rewritten. Writes go to a temporary file renamed into
//! place, so a reader never sees half an entry, and a folder that cannot be
//! written only means nothing is kept. Code whose compiling outlasted its
//! deadline (the engine's compile time limit) is not kept: a module the
//! limit refuses stays refused.
//!
//! Beside the compiled code, an entry can record that a module passed the
//! host's validation (the contract's WebAssembly features, checked over
//! every function body): a small file named by a key over the same engine
//! hash, the features and the module's bytes. A load that finds it skips
//! validating the module again; every other check of a load still runs.
//! The folder is trusted as far as the compiled code in it is (whoever can
//! write there can write native code), so the record adds no new trust.
//!
//! An entry's digest proves it whole, not who wrote it, and the code in it
//! runs natively in this process. So the folder is used only if no other
//! user could have written it, checked as ssh checks its keys: the folder
//! and every folder above it belong to this process's user or to root, and
//! none can be written by group or others (a folder above with the sticky
//! bit, like `/tmp`, may be); each entry read belongs to this user or root
//! and cannot be written by group or others. A folder that fails is not
//! used at all (everything is compiled, nothing kept) and a warning says
//! why and how to fix it (a `tracing` warning, on stderr too when the
//! process has no `tracing` subscriber); an entry that fails is compiled again and
//! replaced. A folder the cache creates is private to its user (0700), and
//! entries are written 0600.
//!
//! The folder is `SandboxConfig::module_cache`: by default
//! `$GANGWAY_MODULE_CACHE`, else `$XDG_CACHE_HOME/gangway/modules`, else
//! `~/.cache/gangway/modules`; `GANGWAY_MODULE_CACHE=off` turns it off.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Engine, Module};

/// The first bytes of an entry (the format's version is its last byte:
/// 2 names the module the code was compiled from).
const MAGIC: &[u8; 8] = b"GWCWASM\x02";

/// The default cache folder, from the environment (see the module docs);
/// `None` when it is turned off or no home is known.
pub(crate) fn default_folder() -> Option<PathBuf> {
    match std::env::var_os("GANGWAY_MODULE_CACHE") {
        Some(v) if v == "off" || v.is_empty() => return None,
        Some(v) => return Some(PathBuf::from(v)),
        None => {}
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("gangway").join("modules"))
}

/// A [`Hasher`] that feeds SHA-256, for a key stable across processes.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        let d = self.0.clone().finalize();
        u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Compiled code of one kind, as the cache stores it.
trait Kind: Sized {
    const NAME: &'static str;
    fn precompile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Vec<u8>>;
    /// Code from an artifact whose digest matched: see [`load`].
    fn load(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Self>;
}

impl Kind for Component {
    const NAME: &'static str = "component";
    fn precompile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
        engine.precompile_component(bytes)
    }
    #[allow(unsafe_code)]
    fn load(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: `artifact` is what this engine's `precompile_component`
        // wrote: the entry's key includes the engine's compatibility hash and
        // its SHA-256 digest matched the bytes, so they are unchanged since;
        // wasmtime checks the header against the engine as well.
        unsafe { Component::deserialize(engine, artifact) }
    }
}

impl Kind for Module {
    const NAME: &'static str = "module";
    fn precompile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
        engine.precompile_module(bytes)
    }
    #[allow(unsafe_code)]
    fn load(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: as for components: this engine's own artifact, its digest
        // checked against the bytes.
        unsafe { Module::deserialize(engine, artifact) }
    }
}

/// The on-disk cache of one engine.
#[derive(Debug)]
pub(crate) struct DiskCache {
    folder: Option<PathBuf>,
    /// Why the configured folder is not used, when another user could
    /// have written it.
    refused: Option<String>,
}

impl DiskCache {
    /// A cache in `folder` (`None`: no cache, everything is compiled),
    /// created private to this user if missing. A folder another user
    /// could write is refused (see the module docs) with a warning.
    pub(crate) fn new(folder: Option<PathBuf>) -> DiskCache {
        let Some(folder) = folder else {
            return DiskCache {
                folder: None,
                refused: None,
            };
        };
        if let Err(e) = create_private(&folder) {
            // As before: a folder that cannot be made only keeps nothing.
            tracing::debug!("module cache {}: {e}", folder.display());
            return DiskCache {
                folder: None,
                refused: None,
            };
        }
        match trust::folder(&folder) {
            Ok(()) => DiskCache {
                folder: Some(folder),
                refused: None,
            },
            Err(why) => {
                let why = format!(
                    "module cache {} is not used: {why} (compiled code there runs in this \
                     process; fix its owner and permissions, e.g. `chmod go-w`, or set \
                     GANGWAY_MODULE_CACHE to a private folder)",
                    folder.display()
                );
                tracing::warn!("{why}");
                if !tracing::dispatcher::has_been_set() {
                    // A host without logging (the Python package, a
                    // program of the user's) still hears it, as ssh says
                    // why it ignores a key.
                    eprintln!("gangway: {why}");
                }
                DiskCache {
                    folder: None,
                    refused: Some(why),
                }
            }
        }
    }

    /// Why the configured folder is not used, if it was refused.
    pub(crate) fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// `bytes` compiled as a component, from the cache or compiled now
    /// (and kept if that ended by `deadline`).
    pub(crate) fn component(
        &self,
        engine: &Engine,
        bytes: &[u8],
        deadline: Instant,
    ) -> wasmtime::Result<Component> {
        self.get(engine, bytes, deadline)
    }

    /// `bytes` compiled as a core module, from the cache or compiled now
    /// (and kept if that ended by `deadline`).
    pub(crate) fn module(
        &self,
        engine: &Engine,
        bytes: &[u8],
        deadline: Instant,
    ) -> wasmtime::Result<Module> {
        self.get(engine, bytes, deadline)
    }

    fn get<K: Kind>(
        &self,
        engine: &Engine,
        bytes: &[u8],
        deadline: Instant,
    ) -> wasmtime::Result<K> {
        let Some(folder) = &self.folder else {
            let artifact = K::precompile(engine, bytes)?;
            return K::load(engine, &artifact);
        };
        let module: [u8; 32] = Sha256::digest(bytes).into();
        let path = folder.join(format!("{}.cwasm", key::<K>(engine, &module)));
        let entry = read(&path, &module);
        if let Some(code) = entry.and_then(|entry| K::load(engine, artifact(&entry)).ok()) {
            return Ok(code);
        }
        let artifact = K::precompile(engine, bytes)?;
        let code = K::load(engine, &artifact)?;
        if Instant::now() > deadline {
            return Ok(code);
        }
        if let Err(e) = write(folder, &path, &module, &artifact) {
            tracing::debug!("module cache {}: {e}", folder.display());
        }
        Ok(code)
    }
}

impl DiskCache {
    /// Whether the module whose bytes hash to `module` passed validation
    /// with `features` on an engine like `engine` (recorded by
    /// [`DiskCache::record_valid`]).
    pub(crate) fn known_valid(&self, engine: &Engine, features: &str, module: &[u8; 32]) -> bool {
        self.folder.as_ref().is_some_and(|f| {
            read_trusted(&f.join(valid_name(engine, features, module)))
                .is_some_and(|b| b == valid_record(module))
        })
    }

    /// Records that the module whose bytes hash to `module` passed
    /// validation with `features`.
    pub(crate) fn record_valid(&self, engine: &Engine, features: &str, module: &[u8; 32]) {
        let Some(folder) = &self.folder else { return };
        if self.known_valid(engine, features, module) {
            return;
        }
        let path = folder.join(valid_name(engine, features, module));
        if let Err(e) = write_file(folder, &path, &valid_record(module)) {
            tracing::debug!("module cache {}: {e}", folder.display());
        }
    }
}

/// What a file that records the module whose bytes hash to `module` as
/// valid holds: a line, then the module's hash (so a record copied under
/// another module's name holds for no module).
fn valid_record(module: &[u8; 32]) -> Vec<u8> {
    [&b"GWCWASM valid\n"[..], module].concat()
}

/// The name of the file that records a module as valid.
fn valid_name(engine: &Engine, features: &str, module: &[u8; 32]) -> String {
    let mut h = ShaHasher(Sha256::new());
    h.write(MAGIC);
    h.write(b"valid");
    engine.precompile_compatibility_hash().hash(&mut h);
    h.write(features.as_bytes());
    h.write(module);
    let key: String = h.0.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{key}.valid")
}

/// The entry name of the module whose bytes hash to `module` compiled as
/// `K` by `engine`.
fn key<K: Kind>(engine: &Engine, module: &[u8; 32]) -> String {
    let mut h = ShaHasher(Sha256::new());
    h.write(MAGIC);
    h.write(K::NAME.as_bytes());
    engine.precompile_compatibility_hash().hash(&mut h);
    h.write(module);
    h.0.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The entry at `path`, whole, if it was compiled from the module whose
/// bytes hash to `module`, the file is whole and unchanged (its artifact
/// is [`artifact`] of it: not copied out) and no other user could have
/// written it.
fn read(path: &Path, module: &[u8; 32]) -> Option<Vec<u8>> {
    let file = read_trusted(path)?;
    let rest = file.strip_prefix(&MAGIC[..])?;
    let (named, rest) = rest.split_at_checked(32)?;
    if named != module {
        tracing::debug!(
            "module cache entry {} was compiled from another module; it is compiled again",
            path.display()
        );
        return None;
    }
    let (digest, artifact) = rest.split_at_checked(32)?;
    (Sha256::digest(artifact).as_slice() == digest).then_some(file)
}

/// The artifact of an entry [`read`] accepted.
fn artifact(entry: &[u8]) -> &[u8] {
    entry.get(MAGIC.len() + 64..).unwrap_or_default()
}

/// Writes the entry at `path`: the code compiled from the module whose
/// bytes hash to `module`.
fn write(folder: &Path, path: &Path, module: &[u8; 32], artifact: &[u8]) -> std::io::Result<()> {
    let mut entry = Vec::with_capacity(MAGIC.len() + 64 + artifact.len());
    entry.extend_from_slice(MAGIC);
    entry.extend_from_slice(module);
    entry.extend_from_slice(&Sha256::digest(artifact));
    entry.extend_from_slice(artifact);
    write_file(folder, path, &entry)
}

/// The bytes of the file at `path` if it belongs to this user or root and
/// cannot be written by group or others (checked on the open file).
fn read_trusted(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    if let Err(why) = trust::entry(&file.metadata().ok()?) {
        tracing::warn!(
            "module cache entry {} is not used: {why}; it is compiled again and replaced",
            path.display()
        );
        return None;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Creates `folder` (and what is missing above it) if it does not exist,
/// the folder itself readable and writable by this user only.
fn create_private(folder: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if folder.is_dir() {
        return Ok(());
    }
    if let Some(parent) = folder.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::DirBuilder::new().mode(0o700).create(folder)
}

/// Writes `bytes` to `path` in `folder` (a temporary file of this process
/// and write, mode 0600, renamed into place, so a reader never sees half of
/// it and two writers, in one process or two, never write the same
/// temporary file).
fn write_file(folder: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    static WRITES: AtomicU64 = AtomicU64::new(0);
    create_private(folder)?;
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes))?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Whether no other user could have written a folder or an entry: the
/// checks ssh makes of its keys.
mod trust {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    /// This process's effective user id.
    #[allow(unsafe_code)]
    fn euid() -> u32 {
        // SAFETY: geteuid has no preconditions, cannot fail and touches no
        // memory of ours.
        unsafe { libc::geteuid() }
    }

    /// Why `meta` (of `what`) could have been written by another user.
    fn writable_by_others(
        meta: &std::fs::Metadata,
        what: &str,
        sticky_ok: bool,
    ) -> Result<(), String> {
        let (owner, mode) = (meta.uid(), meta.mode());
        if owner != 0 && owner != euid() {
            return Err(format!(
                "{what} belongs to user {owner}, not to this process's user ({}) or root",
                euid()
            ));
        }
        if mode & 0o022 != 0 && !(sticky_ok && mode & 0o1000 != 0) {
            return Err(format!(
                "{what} can be written by {} (mode {:04o})",
                if mode & 0o002 != 0 {
                    "anyone"
                } else {
                    "its group"
                },
                mode & 0o7777
            ));
        }
        Ok(())
    }

    /// Checks the cache folder and every folder above it.
    pub(super) fn folder(folder: &Path) -> Result<(), String> {
        let real = folder
            .canonicalize()
            .map_err(|e| format!("it cannot be resolved: {e}"))?;
        let meta = std::fs::metadata(&real).map_err(|e| e.to_string())?;
        writable_by_others(&meta, &format!("the folder {}", real.display()), false)?;
        for above in real.ancestors().skip(1) {
            let meta = std::fs::metadata(above).map_err(|e| e.to_string())?;
            writable_by_others(
                &meta,
                &format!("the folder above it, {},", above.display()),
                true,
            )?;
        }
        Ok(())
    }

    /// Checks one entry, as opened.
    pub(super) fn entry(meta: &std::fs::Metadata) -> Result<(), String> {
        writable_by_others(meta, "it", false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAT: &str = r#"(module (func (export "f") (result i32) i32.const 7))"#;

    fn later() -> Instant {
        Instant::now() + std::time::Duration::from_secs(60)
    }

    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gw-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn f(engine: &Engine, module: &Module) -> i32 {
        let mut store = wasmtime::Store::new(engine, ());
        let instance = wasmtime::Instance::new(&mut store, module, &[]).unwrap();
        let f = instance.get_typed_func::<(), i32>(&mut store, "f").unwrap();
        f.call(&mut store, ()).unwrap()
    }

    #[test]
    fn entries_are_reused_and_damaged_ones_compiled_again() {
        let engine = Engine::default();
        let bytes = wat::parse_str(WAT).unwrap();
        let dir = folder("reuse");
        let cache = DiskCache::new(Some(dir.clone()));
        assert_eq!(
            f(&engine, &cache.module(&engine, &bytes, later()).unwrap()),
            7
        );
        let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(entries.len(), 1, "one entry");
        let path = entries[0].path();
        let written = std::fs::read(&path).unwrap();
        // Read back as it was written.
        let named: [u8; 32] = Sha256::digest(&bytes).into();
        assert!(read(&path, &named).is_some());
        assert_eq!(
            f(&engine, &cache.module(&engine, &bytes, later()).unwrap()),
            7
        );
        // One byte flipped: refused, compiled again, rewritten whole.
        let mut damaged = written.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 0x40;
        std::fs::write(&path, &damaged).unwrap();
        assert!(read(&path, &named).is_none());
        assert_eq!(
            f(&engine, &cache.module(&engine, &bytes, later()).unwrap()),
            7
        );
        assert_eq!(std::fs::read(&path).unwrap(), written);
        // A foreign file under the name, a truncated one: the same.
        for junk in [&b"not an entry"[..], &written[..20]] {
            std::fs::write(&path, junk).unwrap();
            assert_eq!(
                f(&engine, &cache.module(&engine, &bytes, later()).unwrap()),
                7
            );
            assert_eq!(std::fs::read(&path).unwrap(), written);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An entry copied under another module's name (by someone who may
    /// write the folder) holds the first module's code: it is not used for
    /// the second, which is compiled again and its entry rewritten.
    #[test]
    fn an_entry_under_another_modules_name_is_not_used() {
        let engine = Engine::default();
        let seven = wat::parse_str(WAT).unwrap();
        let eight = wat::parse_str(WAT.replace("i32.const 7", "i32.const 8")).unwrap();
        let dir = folder("named");
        let cache = DiskCache::new(Some(dir.clone()));
        assert_eq!(
            f(&engine, &cache.module(&engine, &seven, later()).unwrap()),
            7
        );
        assert_eq!(
            f(&engine, &cache.module(&engine, &eight, later()).unwrap()),
            8
        );
        let entry = |bytes: &[u8]| {
            let module: [u8; 32] = Sha256::digest(bytes).into();
            dir.join(format!("{}.cwasm", key::<Module>(&engine, &module)))
        };
        let (of_seven, of_eight) = (entry(&seven), entry(&eight));
        let eights = std::fs::read(&of_eight).unwrap();
        std::fs::copy(&of_seven, &of_eight).unwrap();
        // Whole and unchanged, so only the name it records tells.
        assert_eq!(
            f(&engine, &cache.module(&engine, &eight, later()).unwrap()),
            8
        );
        assert_eq!(std::fs::read(&of_eight).unwrap(), eights, "rewritten");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn another_engine_configuration_has_its_own_entries() {
        let bytes = wat::parse_str(WAT).unwrap();
        let mut fuel = wasmtime::Config::new();
        fuel.consume_fuel(true);
        let (a, b) = (Engine::default(), Engine::new(&fuel).unwrap());
        let m: [u8; 32] = Sha256::digest(&bytes).into();
        assert_ne!(key::<Module>(&a, &m), key::<Module>(&b, &m));
        assert_ne!(key::<Module>(&a, &m), key::<Component>(&a, &m));
        let dir = folder("engines");
        let cache = DiskCache::new(Some(dir.clone()));
        cache.module(&a, &bytes, later()).unwrap();
        cache.module(&b, &bytes, later()).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn code_compiled_past_its_deadline_is_not_kept() {
        let engine = Engine::default();
        let bytes = wat::parse_str(WAT).unwrap();
        let dir = folder("late");
        let cache = DiskCache::new(Some(dir.clone()));
        let late = cache.module(&engine, &bytes, Instant::now()).unwrap();
        assert_eq!(f(&engine, &late), 7);
        assert!(!dir.exists() || std::fs::read_dir(&dir).unwrap().count() == 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unwritable_folder_only_means_nothing_is_kept() {
        let engine = Engine::default();
        let bytes = wat::parse_str(WAT).unwrap();
        let file = folder("file");
        std::fs::write(&file, b"a file, not a folder").unwrap();
        let cache = DiskCache::new(Some(file.join("sub")));
        assert_eq!(
            f(&engine, &cache.module(&engine, &bytes, later()).unwrap()),
            7
        );
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn a_folder_or_entry_others_could_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let engine = Engine::default();
        let bytes = wat::parse_str(WAT).unwrap();
        // Created private, entries written 0600.
        let dir = folder("trust");
        let cache = DiskCache::new(Some(dir.clone()));
        assert!(cache.refused().is_none());
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        cache.module(&engine, &bytes, later()).unwrap();
        let entry = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .path();
        assert_eq!(
            std::fs::metadata(&entry).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // An entry anyone may write is not read, and is replaced.
        let named: [u8; 32] = Sha256::digest(&bytes).into();
        mode(&entry, 0o666);
        assert!(read(&entry, &named).is_none());
        assert_eq!(
            f(&engine, &cache.module(&engine, &bytes, later()).unwrap()),
            7
        );
        assert_eq!(
            std::fs::metadata(&entry).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(read(&entry, &named).is_some());
        // A folder its group or anyone may write is not used at all: it
        // says why, nothing is read from it or written to it.
        for (m, who) in [(0o777, "anyone"), (0o770, "its group")] {
            mode(&dir, m);
            let refused = DiskCache::new(Some(dir.clone()));
            let why = refused.refused().unwrap().to_string();
            assert!(why.contains(&format!("can be written by {who}")), "{why}");
            assert!(why.contains(&dir.display().to_string()), "{why}");
            std::fs::remove_file(&entry).unwrap();
            assert_eq!(
                f(&engine, &refused.module(&engine, &bytes, later()).unwrap()),
                7
            );
            assert_eq!(
                std::fs::read_dir(&dir).unwrap().count(),
                0,
                "nothing written"
            );
            mode(&dir, 0o700);
            cache.module(&engine, &bytes, later()).unwrap();
        }
        // A folder above it that others may write, without the sticky bit.
        let outer = folder("trust-outer");
        let inner = outer.join("modules");
        std::fs::create_dir_all(&inner).unwrap();
        mode(&outer, 0o777);
        let why = DiskCache::new(Some(inner.clone()))
            .refused()
            .unwrap()
            .to_string();
        assert!(why.contains("the folder above it"), "{why}");
        mode(&outer, 0o1777);
        assert!(DiskCache::new(Some(inner)).refused().is_none());
        std::fs::remove_dir_all(&outer).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_valid_record_holds_for_its_module_features_and_engine_only() {
        let mut fuel = wasmtime::Config::new();
        fuel.consume_fuel(true);
        let (a, b) = (Engine::default(), Engine::new(&fuel).unwrap());
        let dir = folder("valid");
        let cache = DiskCache::new(Some(dir.clone()));
        let (m, other) = ([1u8; 32], [2u8; 32]);
        assert!(!cache.known_valid(&a, "features", &m));
        cache.record_valid(&a, "features", &m);
        assert!(cache.known_valid(&a, "features", &m));
        assert!(!cache.known_valid(&a, "features", &other), "another module");
        assert!(
            !cache.known_valid(&a, "other features", &m),
            "other features"
        );
        assert!(
            !cache.known_valid(&b, "features", &m),
            "another engine configuration"
        );
        // A record copied under another module's name holds for neither.
        std::fs::copy(
            dir.join(valid_name(&a, "features", &m)),
            dir.join(valid_name(&a, "features", &other)),
        )
        .unwrap();
        assert!(
            !cache.known_valid(&a, "features", &other),
            "a copied record"
        );
        // No folder: nothing is known, recording does nothing.
        let none = DiskCache::new(None);
        none.record_valid(&a, "features", &m);
        assert!(!none.known_valid(&a, "features", &m));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
