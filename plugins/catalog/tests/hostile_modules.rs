//! Hostile policy modules of every kind the sandbox review found, run the
//! way a user meets them: `policy-check MODULE` ends with one `FAIL:` line
//! naming what is wrong (followed, for a broken rule on a view, by the
//! smallest failing view as a regression test), within the bounds of
//! [`hostile`].
#![allow(clippy::unwrap_used)]

mod hostile;

use hostile::{hostile_modules, measured, save, within_bounds};

#[test]
fn policy_check_bounds_every_hostile_module() {
    for (name, bytes, _, verdict) in hostile_modules() {
        let path = save(name, &bytes);
        let m = measured(env!("CARGO_BIN_EXE_policy-check"), &[&path]);
        within_bounds(&format!("policy-check {name}"), &m);
        assert_eq!(m.status.code(), Some(1), "{name}: {}", m.stdout);
        let first = m.stdout.lines().next().unwrap_or_default();
        assert!(first.starts_with("FAIL: "), "{name}: {}", m.stdout);
        assert!(first.contains(verdict), "{name}: {}", m.stdout);
        if m.stdout.lines().count() > 1 {
            // The regression test loads the module from the path given.
            assert!(m.stdout.contains("#[test]"), "{name}: {}", m.stdout);
            assert!(
                m.stdout.contains(&format!("load_file({path:?})")),
                "{name}: {}",
                m.stdout
            );
            assert!(m.stdout.contains("check_view"), "{name}: {}", m.stdout);
        }
    }
}
