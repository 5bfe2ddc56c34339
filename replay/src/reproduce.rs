//! What reproduces a report: the Gangway version and commit, the arguments
//! that shape the results, the seed, the time scale and a hash of every
//! input file (`report.json`'s `reproduce`).

use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// `report.json`'s `reproduce`: enough to run the same replay again and
/// check it is the same.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reproduce {
    /// The `gangway-replay` crate's version.
    pub gangway_version: String,
    /// The commit it was built from (`unknown` outside a git checkout).
    pub commit: String,
    /// The command's arguments after the program name, without those that
    /// only choose where and how output goes or how policies are run
    /// ([`OUTPUT_ONLY`]): the same arguments give the same report.
    pub args: Vec<String>,
    /// The seed (generator, heartbeat placement, failures).
    pub seed: u64,
    /// The factor on submit times.
    pub time_scale: f64,
    /// Every input file read, with its SHA-256.
    pub inputs: Vec<InputFile>,
}

/// One input file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InputFile {
    /// What it is (`trace`, `vcs`, `machines`, `config of fairness in philly`, ...).
    pub role: String,
    /// The path as given.
    pub path: String,
    /// SHA-256 of its bytes, in hex.
    pub sha256: String,
}

/// Flags (with their value, where they take one) left out of
/// [`Reproduce::args`]: output places and formats, verbosity, and
/// `--native`, whose reports are byte-identical to Wasm runs.
pub const OUTPUT_ONLY: [(&str, bool); 6] = [
    ("--out", true),
    ("--no-plots", false),
    ("--jobs-csv", false),
    ("--verbose", false),
    ("--native", false),
    ("--quiet", false),
];

/// `argv` (after the program name) without the flags of [`OUTPUT_ONLY`].
///
/// ```
/// use gangway_replay::reproduce::result_args;
/// let argv = ["--jobs", "300", "--out", "/tmp/x", "--native", "-vv", "--out=/y", "--seed", "2"];
/// assert_eq!(result_args(argv.map(String::from)), ["--jobs", "300", "--seed", "2"]);
/// ```
pub fn result_args(argv: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in argv {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        if a.starts_with('-') && !a.starts_with("--") && a.chars().skip(1).all(|c| c == 'v') {
            continue; // -v, -vv
        }
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
        if let Some((_, takes_value)) = OUTPUT_ONLY.iter().find(|(f, _)| *f == name) {
            skip_value = *takes_value && !a.contains('=');
            continue;
        }
        out.push(a);
    }
    out
}

/// The SHA-256 of `path`'s bytes in hex, or why it could not be read.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    Ok(sha256_hex(&std::fs::read(path)?))
}

/// The SHA-256 of `bytes` in hex.
///
/// ```
/// assert_eq!(
///     gangway_replay::reproduce::sha256_hex(b"abc"),
///     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
/// );
/// ```
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Reproduce {
    /// A record for this build, with no input files yet.
    pub fn new(args: Vec<String>, seed: u64, time_scale: f64) -> Reproduce {
        Reproduce {
            gangway_version: env!("CARGO_PKG_VERSION").to_string(),
            commit: env!("GANGWAY_COMMIT").to_string(),
            args,
            seed,
            time_scale,
            inputs: Vec::new(),
        }
    }

    /// Adds `path` as an input file playing `role`.
    pub fn add_file(&mut self, role: &str, path: &Path) -> std::io::Result<()> {
        self.inputs.push(InputFile {
            role: role.to_string(),
            path: path.display().to_string(),
            sha256: sha256_file(path)?,
        });
        Ok(())
    }

    /// Adds input bytes that came from a file the caller names.
    pub fn add_bytes(&mut self, role: &str, path: &str, bytes: &[u8]) {
        self.inputs.push(InputFile {
            role: role.to_string(),
            path: path.to_string(),
            sha256: sha256_hex(bytes),
        });
    }
}
