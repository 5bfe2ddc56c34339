//! Hostile policy modules of every kind the sandbox review found, run the
//! way a user meets them: `policy-check MODULE` ends with one `FAIL:` line
//! naming what is wrong, within the bounds of [`hostile`].
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
        assert_eq!(m.stdout.lines().count(), 1, "{name}: {}", m.stdout);
        assert!(m.stdout.starts_with("FAIL: "), "{name}: {}", m.stdout);
        assert!(m.stdout.contains(verdict), "{name}: {}", m.stdout);
    }
}
