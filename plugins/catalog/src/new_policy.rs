//! `policy-check new NAME`: a policy crate of its own, outside any
//! workspace, that builds to a Wasm module and runs the conformance kit in
//! `cargo test`: `Cargo.toml` (the SDK and, for tests, gangway-core without
//! the Wasm host, as path dependencies on the Gangway clone it was made
//! from; the git and registry forms in comments), `rust-toolchain.toml`
//! (the toolchain and the `wasm32-unknown-unknown` target), a fairness
//! policy in `src/lib.rs`, `tests/conformance.rs` and a README.

use std::path::{Path, PathBuf};

/// Why a policy crate could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NewPolicyError {
    /// The name is not a crate name this command accepts.
    #[error(
        "{0:?} is not a policy name: use lowercase letters, digits and '-', starting with a letter"
    )]
    BadName(String),
    /// The folder exists already.
    #[error("{0} exists already; choose another name or folder")]
    Exists(PathBuf),
    /// The Gangway clone to depend on has no SDK.
    #[error(
        "{0} is not a Gangway clone (no plugin-sdk/Cargo.toml); pass the clone with --gangway DIR"
    )]
    NoGangway(PathBuf),
    /// A file could not be written.
    #[error("{path}: cannot write: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The Gangway clone this binary was built from (where `plugin-sdk/` is).
pub fn built_from() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Makes sure rustup's toolchain `channel` of the clone (the one the
/// crate's `rust-toolchain.toml` names) has the `wasm32-unknown-unknown`
/// standard library, adding it with `rustup target add` if it is missing
/// (rustup installs a toolchain file's targets only with the toolchain
/// itself). Returns what it did, or why it could not: without rustup the
/// target must come from the Rust installation's own packages.
pub fn ensure_wasm_target() -> Result<String, String> {
    use std::process::Command;
    const TARGET: &str = "wasm32-unknown-unknown";
    let channel = channel();
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed", "--toolchain", channel])
        .output()
        .map_err(|e| {
            format!("rustup is not available ({e}): install the {TARGET} target for your Rust")
        })?;
    if !installed.status.success() {
        return Err(format!(
            "rustup has no toolchain {channel} yet; the first cargo command in the crate installs it with {TARGET}"
        ));
    }
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.trim() == TARGET)
    {
        return Ok(format!("toolchain {channel} has the {TARGET} target"));
    }
    let status = Command::new("rustup")
        .args(["target", "add", "--toolchain", channel, TARGET])
        .status()
        .map_err(|e| format!("rustup target add {TARGET}: {e}"))?;
    if status.success() {
        Ok(format!("added the {TARGET} target to toolchain {channel}"))
    } else {
        Err(format!(
            "rustup target add --toolchain {channel} {TARGET} failed ({status})"
        ))
    }
}

/// The toolchain channel of the clone's `rust-toolchain.toml`.
fn channel() -> &'static str {
    include_str!("../../../rust-toolchain.toml")
        .lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))
        .map_or("stable", |c| c.trim_matches('"'))
}

const FILES: [(&str, &str); 6] = [
    ("Cargo.toml", include_str!("../template/Cargo.toml.in")),
    (
        "rust-toolchain.toml",
        include_str!("../template/rust-toolchain.toml.in"),
    ),
    (".gitignore", include_str!("../template/gitignore.in")),
    ("README.md", include_str!("../template/README.md.in")),
    ("src/lib.rs", include_str!("../template/src/lib.rs.in")),
    (
        "tests/conformance.rs",
        include_str!("../template/tests/conformance.rs.in"),
    ),
];

/// Makes the policy crate `name` in `dir/name`, depending on the Gangway
/// clone at `gangway`; returns the crate's folder.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("gangway-new-doc-{}", std::process::id()));
/// let made = gangway_catalog::new_policy::create(&dir, "oldest-first", &gangway_catalog::new_policy::built_from()).unwrap();
/// let lib = std::fs::read_to_string(made.join("src/lib.rs")).unwrap();
/// assert!(lib.contains("pub struct OldestFirst"));
/// assert!(lib.contains("gangway_plugin_sdk::export!(Fairness, OldestFirst);"));
/// assert!(gangway_catalog::new_policy::create(&dir, "oldest-first", &gangway_catalog::new_policy::built_from()).is_err());
/// assert!(gangway_catalog::new_policy::create(&dir, "Bad Name", &gangway_catalog::new_policy::built_from()).is_err());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn create(dir: &Path, name: &str, gangway: &Path) -> Result<PathBuf, NewPolicyError> {
    let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if !valid {
        return Err(NewPolicyError::BadName(name.to_string()));
    }
    if !gangway.join("plugin-sdk/Cargo.toml").is_file() {
        return Err(NewPolicyError::NoGangway(gangway.to_path_buf()));
    }
    let gangway = gangway
        .canonicalize()
        .map_err(|_| NewPolicyError::NoGangway(gangway.to_path_buf()))?;
    let root = dir.join(name);
    if root.exists() {
        return Err(NewPolicyError::Exists(root));
    }
    let ident = name.replace('-', "_");
    let type_name: String = name
        .split('-')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect();
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{ident}}", &ident)
            .replace("{{type}}", &type_name)
            .replace("{{channel}}", channel())
            .replace("{{sdk}}", &gangway.join("plugin-sdk").display().to_string())
            .replace("{{core}}", &gangway.join("core").display().to_string())
    };
    for (file, text) in FILES {
        let path = root.join(file);
        let write = |path: &Path| -> std::io::Result<()> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, fill(text))
        };
        write(&path).map_err(|source| NewPolicyError::Write {
            path: path.clone(),
            source,
        })?;
    }
    Ok(root)
}
