//! The `replay` command as a library call, for hosts in other languages (the
//! `gangway` Python package): the command line's arguments in, the text of
//! the `report.json` it wrote out.
//!
//! The arguments go through the same clap parser and the same
//! [`replay_cli::run`] as the `replay` binary, so every flag the command
//! gains is there too, and the report is byte for byte the file the command
//! writes for the same arguments.

use std::path::PathBuf;

use clap::{CommandFactory, Parser};

use crate::cli::{self as replay_cli, Cli, ReplayError};

/// Why [`replay_json`] gave no report.
#[derive(Debug, thiserror::Error)]
pub enum ReplayJsonError {
    /// The arguments do not parse; the message is clap's, as `replay` prints it.
    #[error("{0}")]
    Args(String),
    /// The replay failed; the message is the one `replay` prints after `replay: `.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The report the replay wrote could not be read back.
    #[error("{file}: cannot read the report back: {source}")]
    Read {
        /// The report file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Runs `replay` with `args` (the arguments after the program name, e.g.
/// `["--jobs", "2000", "--out", "/tmp/r"]`) and returns the `report.json` it
/// wrote to its `--out` directory, as text. Timings and the summary table go
/// to stdout and a progress bar to stderr when it is a terminal, as from the
/// command.
///
/// ```
/// let out = std::env::temp_dir().join(format!("replay-json-doc-{}", std::process::id()));
/// let out = out.display().to_string();
/// let json = gangway_replay::json::replay_json(
///     ["--jobs", "300", "--native", "--no-plots", "--out", &out],
/// )?;
/// assert!(json.contains("\"runs\""));
/// assert_eq!(std::fs::read_to_string(format!("{out}/report.json"))?, json);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_json<I, T>(args: I) -> Result<String, ReplayJsonError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    replay_json_observed(args, &mut |_, _| std::ops::ControlFlow::Continue(()))
}

/// [`replay_json`], with `observer` told how far each policy set's replay
/// has got (see [`replay_cli::run_observed`]); a `Break` stops it with
/// an interrupted error.
pub fn replay_json_observed<I, T>(
    args: I,
    observer: &mut dyn FnMut(usize, replay_cli::Watched<'_>) -> std::ops::ControlFlow<()>,
) -> Result<String, ReplayJsonError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    replay_json_with(args, Vec::new(), observer)
}

/// [`replay_json_observed`], with policies the host supplies for some
/// slots of every policy set ([`replay_cli::PolicyOverride`]).
pub fn replay_json_with<I, T>(
    args: I,
    overrides: Vec<replay_cli::PolicyOverride>,
    observer: &mut dyn FnMut(usize, replay_cli::Watched<'_>) -> std::ops::ControlFlow<()>,
) -> Result<String, ReplayJsonError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let argv =
        std::iter::once(std::ffi::OsString::from("replay")).chain(args.into_iter().map(Into::into));
    let argv: Vec<std::ffi::OsString> = argv.collect();
    let mut cli = Cli::try_parse_from(&argv).map_err(|e| ReplayJsonError::Args(e.to_string()))?;
    cli.argv = argv
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    cli.policy_overrides = overrides;
    replay_cli::run_observed(&cli, observer)?;
    let path: PathBuf = cli.out.join("report.json");
    std::fs::read_to_string(&path).map_err(|source| ReplayJsonError::Read {
        file: path.display().to_string(),
        source,
    })
}

/// The text of `replay --help`.
///
/// ```
/// assert!(gangway_replay::json::replay_help().contains("--trace"));
/// ```
pub fn replay_help() -> String {
    Cli::command().render_long_help().to_string()
}
