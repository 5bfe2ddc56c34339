//! Every policy crate under `plugins/`, compiled to `wasm32-unknown-unknown`
//! and componentized by this crate's build script, embedded as bytes; and
//! the list of built-in policies by slot ([`builtin_policies!`]), from which
//! the catalog is made.
//!
//! A plugin is any directory `plugins/<name>/` holding a crate
//! `gangway-policy-<name>` with `crate-type = ["cdylib", "rlib"]` that
//! declares its policies in its `Cargo.toml` (`[package.metadata.gangway]
//! policies = [{ name, slot, type }]`) and exports them with the SDK's
//! `export!` macro. Its module is called `<name>`.
//!
//! ```
//! let names: Vec<&str> = gangway_plugin_artifacts::all().iter().map(|(n, _)| *n).collect();
//! assert!(names.contains(&"fifo"));
//! let fifo = gangway_plugin_artifacts::module("fifo").unwrap();
//! assert_eq!(&fifo[..4], b"\0asm");
//! assert!(gangway_plugin_artifacts::module("no-such-policy").is_none());
//! ```

use std::path::Path;
use std::sync::OnceLock;

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
include!(concat!(env!("OUT_DIR"), "/policies.rs"));

/// Every policy module as `(name, component bytes)`, sorted by name.
pub fn all() -> &'static [(&'static str, &'static [u8])] {
    static LIST: OnceLock<Vec<(&'static str, &'static [u8])>> = OnceLock::new();
    LIST.get_or_init(|| ALL.iter().map(|(n, _, b, _)| (*n, *b)).collect())
}

/// The component bytes of the module called `name`.
pub fn module(name: &str) -> Option<&'static [u8]> {
    ALL.iter()
        .find(|(n, _, _, _)| *n == name)
        .map(|(_, _, b, _)| *b)
}

/// Where the build wrote the module called `name` (for tools that take a file).
pub fn path(name: &str) -> Option<&'static Path> {
    ALL.iter()
        .find(|(n, _, _, _)| *n == name)
        .map(|(_, p, _, _)| Path::new(*p))
}

/// Where cargo wrote the core module of `name`, before it was made a
/// component: what a policy author's own `cargo build --target
/// wasm32-unknown-unknown` leaves (hosts load it as it is).
pub fn core_path(name: &str) -> Option<&'static Path> {
    ALL.iter()
        .find(|(n, _, _, _)| *n == name)
        .map(|(_, _, _, c)| Path::new(*c))
}

/// The names of every module, sorted.
pub fn names() -> impl Iterator<Item = &'static str> {
    ALL.iter().map(|(n, _, _, _)| *n)
}
