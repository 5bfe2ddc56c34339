//! The compiled-module cache shared by processes: two replays filling an
//! empty cache at once both succeed and leave only whole entries, which a
//! later run uses as they are.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};

mod common;
use common::dir;

/// A replay of three presets (every module of each compiled or read from
/// `cache`), writing its report to `out`.
fn spawn(cache: &Path, out: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_replay"))
        .args(["--jobs", "400", "--seed", "3", "--no-plots"])
        .args(["--compare", "philly,tiresias,locality-first", "--out"])
        .arg(out)
        .env("GANGWAY_MODULE_CACHE", cache)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait(child: Child) {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each file of the cache folder by name, with its inode and length: an
/// entry rewritten (a new file renamed into place) gets a new inode.
#[cfg(unix)]
fn entries(cache: &Path) -> BTreeMap<String, (u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(cache)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                (m.ino(), m.len()),
            )
        })
        .collect()
}

#[cfg(unix)]
#[test]
fn two_processes_filling_the_cache_at_once_leave_it_whole() {
    let d = dir("two-at-once");
    let cache = d.join("cache");
    let (a, b) = (spawn(&cache, &d.join("a")), spawn(&cache, &d.join("b")));
    wait(a);
    wait(b);
    // The report minus its reproduce block (which names the `--out` folder).
    let report = |name: &str| {
        let text = std::fs::read(d.join(name).join("report.json")).unwrap();
        let mut r: serde_json::Value = serde_json::from_slice(&text).unwrap();
        r.as_object_mut().unwrap().remove("reproduce");
        r
    };
    assert_eq!(report("a"), report("b"), "the two runs decided differently");

    let filled = entries(&cache);
    let compiled = filled.keys().filter(|n| n.ends_with(".cwasm")).count();
    assert!(compiled >= 6, "too few compiled entries: {filled:?}");
    assert!(
        filled
            .keys()
            .all(|n| n.ends_with(".cwasm") || n.ends_with(".valid")),
        "temporary files left behind: {filled:?}"
    );

    // A third run reads every entry as it is: none is damaged or half
    // written (that would be compiled again and rewritten), and it decides
    // as the two did.
    wait(spawn(&cache, &d.join("c")));
    assert_eq!(entries(&cache), filled, "the third run rewrote entries");
    assert_eq!(report("c"), report("a"));
    std::fs::remove_dir_all(&d).unwrap();
}
