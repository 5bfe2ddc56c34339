//! Records the commit the `replay` crate is built from, for `report.json`'s
//! `reproduce.commit` (`GANGWAY_COMMIT`: the environment's, else `git
//! rev-parse HEAD`, else `unknown`, e.g. when built from a source archive).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=GANGWAY_COMMIT");
    let commit = std::env::var("GANGWAY_COMMIT").ok().or_else(git_head);
    println!(
        "cargo:rustc-env=GANGWAY_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}

/// The checkout's HEAD commit, rebuilding when it moves.
fn git_head() -> Option<String> {
    let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(&dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
    };
    let git_dir = git(&["rev-parse", "--absolute-git-dir"])?;
    let git_dir = Path::new(&git_dir);
    println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
    println!(
        "cargo:rerun-if-changed={}",
        git_dir.join("packed-refs").display()
    );
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
        println!(
            "cargo:rerun-if-changed={}",
            git_dir.join(head_ref).display()
        );
    }
    git(&["rev-parse", "HEAD"]).filter(|c| !c.is_empty())
}
