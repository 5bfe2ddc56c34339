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
    /// The command's arguments that shape the results, in a canonical form
    /// ([`result_args`]: the order of `--help`, `--name=value`), without
    /// those that only choose where and how output goes or how policies are
    /// run ([`OUTPUT_ONLY`]): the same arguments, in any order, give the
    /// same report.
    pub args: Vec<String>,
    /// The seed (generator, heartbeat placement, failures).
    pub seed: u64,
    /// The factor on submit times.
    pub time_scale: f64,
    /// The VCs' quotas: the model (`--quotas`) and what it gave, in one
    /// line (`demand:0.711: each VC's share ...`, `helios: the Helios
    /// artifact's Philly VC sizes ...`).
    pub quotas: String,
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

/// `argv` (after the program name) of the command `cmd` (`replay`'s:
/// `Cli::command()`) in a canonical form: each option given
/// on the command line, in the order `replay --help` lists them (whatever
/// order they were given in), as `--name` or `--name=value` (one per value),
/// without the flags of [`OUTPUT_ONLY`]. Arguments that do not parse are
/// kept as given.
///
/// ```
/// use clap::CommandFactory;
/// use gangway_replay::{cli::Cli, reproduce::result_args};
/// let result_args = |argv: &[&str]| result_args(Cli::command(), argv.iter().map(|a| a.to_string()));
/// let a = ["--seed", "2", "--jobs", "300", "--out", "/tmp/x", "--native", "-vv", "--compare", "philly,fifo"];
/// let b = ["--jobs=300", "--compare", "philly,fifo", "--seed=2", "--no-plots"];
/// assert_eq!(result_args(&a), ["--compare=philly", "--compare=fifo", "--seed=2", "--jobs=300"]);
/// assert_eq!(result_args(&a), result_args(&b));
/// ```
pub fn result_args(mut cmd: clap::Command, argv: impl IntoIterator<Item = String>) -> Vec<String> {
    let argv: Vec<String> = argv.into_iter().collect();
    cmd.build();
    let Ok(matches) = cmd
        .clone()
        .try_get_matches_from(std::iter::once("replay".to_string()).chain(argv.iter().cloned()))
    else {
        return argv;
    };
    let mut out = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else {
            continue;
        };
        let flag = format!("--{long}");
        if OUTPUT_ONLY.iter().any(|(f, _)| *f == flag)
            || matches.value_source(id) != Some(clap::parser::ValueSource::CommandLine)
        {
            continue;
        }
        let takes_values = arg.get_action().takes_values();
        match matches.get_raw(id) {
            Some(values) if takes_values => {
                for v in values {
                    out.push(format!("{flag}={}", v.to_string_lossy()));
                }
            }
            _ => {
                // A switch, or a count (-v is output-only, dropped above).
                out.push(flag);
            }
        }
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
            quotas: String::new(),
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
