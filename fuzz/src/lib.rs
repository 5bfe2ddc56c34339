//! Fuzz targets for every decoder and parser of Gangway, and a runner that
//! drives them on stable Rust.
//!
//! Each target in [`targets`] takes arbitrary bytes and panics only when
//! Gangway breaks a promise (a panic inside Gangway, an invariant violated,
//! a decoded value that does not round-trip); every other outcome, a typed
//! error included, is fine. The same functions run two ways:
//!
//! * **libFuzzer** (coverage-guided, nightly): the binaries in
//!   `fuzz/libfuzzer` call them, `cargo +nightly fuzz run --fuzz-dir
//!   fuzz/libfuzzer TARGET fuzz/corpus/TARGET`.
//! * **Stable** ([`runner`]): the committed corpus of each target, then
//!   seeded random mutations of it for a fixed time. This is what
//!   `cargo test -p gangway-fuzz` (and so CI) runs: `GANGWAY_FUZZ_SECONDS`
//!   per target (default 3; CI sets 30) and `GANGWAY_FUZZ_SEED`.
//!
//! ```
//! use gangway_fuzz::{runner, targets};
//! let target = targets::find("machine_list").unwrap();
//! let corpus = vec![b"m0,8,24GB\nm1,4,12GB\n".to_vec()];
//! let stats = runner::run(target, &corpus, &runner::Budget::iterations(200, 1)).unwrap();
//! assert!(stats.executions >= 201);
//! ```

pub mod runner;
pub mod targets;
