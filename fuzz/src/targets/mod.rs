//! The fuzz targets, one function each, and their registry.
//!
//! | target | what it feeds | what must hold |
//! |---|---|---|
//! | `machine_list` | a Philly machine list | an error, or a topology of sane servers |
//! | `topology_toml` | a topology file | an error naming a line, or a topology |
//! | `philly_log` | Philly's `cluster_job_log` JSON | an error naming the file, or a trace of valid jobs |
//! | `csv_jobs`, `rfold`, `adaptdl` | the CSV trace formats | as above |
//! | `presets` | a presets file | an error, or presets that build |
//! | `policy_config` | a built-in policy's configuration, for every slot and policy | an error, or a policy whose decisions are valid |
//! | `view_decode` | bytes as a view of any slot (the guest's decoder) | an error, or a view that the serde decoder reads the same and that re-encodes to the same view |
//! | `wire_roundtrip` | generated views and decisions | the fast codec writes exactly postcard's bytes and decodes them back |
//! | `manifest` | bytes as a policy manifest | an error, or a manifest that re-encodes to itself |
//! | `replies` | bytes (raw, or a valid decision mutated) as a guest's reply to a generated view, for every slot | the host's bounded decoder and validator return a decision that passes every rule, or an error |
//! | `wasm_replies_direct`, `wasm_replies_component` | the same replies returned by a real Wasm guest (ok, error, raw ABI words, misaligned return area), through each call path | a valid decision or a typed policy error; the instance is replaced after a failure |
//! | `scheduler_events` | a sequence of host events under the `philly`, `tiresias` or built-in policies | every event accepted or refused with a typed error; invariants after every step |

mod config;
mod replies;
mod scheduler;
mod text;
mod wasm;
mod wire;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// One fuzz target.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Its name (also its corpus directory and libFuzzer binary).
    pub name: &'static str,
    /// What it feeds and checks.
    pub about: &'static str,
    /// The body: panics only when Gangway breaks a promise.
    pub run: fn(&[u8]),
    /// Tokens the stable runner inserts while mutating.
    pub dictionary: &'static [&'static [u8]],
}

const TEXT_TOKENS: &[&[u8]] = &[
    b",",
    b"\n",
    b"\"",
    b"8",
    b"0",
    b"-1",
    b"4294967296",
    b"18446744073709551616",
    b"1e309",
    b"NaN",
    b"null",
    b"None",
    b"[",
    b"]",
    b"{",
    b"}",
    b"=",
    b"\xff",
    b"\xc3\xa9",
];
const BYTE_TOKENS: &[&[u8]] = &[
    b"\xff\xff\xff\xff\x0f",
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    b"\x80",
    b"\x00",
    b"\x01",
];

/// Every target.
pub const ALL: &[Target] = &[
    Target {
        name: "machine_list",
        about: "Philly machine lists",
        run: text::machine_list,
        dictionary: TEXT_TOKENS,
    },
    Target {
        name: "topology_toml",
        about: "topology files",
        run: text::topology_toml,
        dictionary: TEXT_TOKENS,
    },
    Target {
        name: "philly_log",
        about: "Philly's cluster_job_log",
        run: text::philly_log,
        dictionary: TEXT_TOKENS,
    },
    Target {
        name: "csv_jobs",
        about: "Gangway's CSV job lists",
        run: text::csv_jobs,
        dictionary: TEXT_TOKENS,
    },
    Target {
        name: "rfold",
        about: "the RFold-derived trace",
        run: text::rfold,
        dictionary: TEXT_TOKENS,
    },
    Target {
        name: "adaptdl",
        about: "the AdaptDL-derived trace",
        run: text::adaptdl,
        dictionary: TEXT_TOKENS,
    },
    Target {
        name: "presets",
        about: "preset files",
        run: text::presets,
        dictionary: TEXT_TOKENS,
    },
    Target {
        name: "policy_config",
        about: "built-in policies' configurations",
        run: config::policy_config,
        dictionary: TEXT_TOKENS,
    },
    Target {
        name: "view_decode",
        about: "the guest's view decoder",
        run: wire::view_decode,
        dictionary: BYTE_TOKENS,
    },
    Target {
        name: "wire_roundtrip",
        about: "the wire format on generated values",
        run: wire::wire_roundtrip,
        dictionary: BYTE_TOKENS,
    },
    Target {
        name: "manifest",
        about: "policy manifests",
        run: wire::manifest,
        dictionary: BYTE_TOKENS,
    },
    Target {
        name: "replies",
        about: "the host's reply decoder and validator",
        run: replies::replies,
        dictionary: BYTE_TOKENS,
    },
    Target {
        name: "wasm_replies_direct",
        about: "guest replies through the direct call path",
        run: wasm::replies_direct,
        dictionary: BYTE_TOKENS,
    },
    Target {
        name: "wasm_replies_component",
        about: "guest replies through the component runtime",
        run: wasm::replies_component,
        dictionary: BYTE_TOKENS,
    },
    Target {
        name: "scheduler_events",
        about: "host event sequences",
        run: scheduler::scheduler_events,
        dictionary: BYTE_TOKENS,
    },
];

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static Target> {
    ALL.iter().find(|t| t.name == name)
}

/// Runs the target called `name` on `data` (the libFuzzer binaries' entry).
///
/// # Panics
/// When no target has that name, or when Gangway breaks a promise on `data`.
pub fn run_named(name: &str, data: &[u8]) {
    match find(name) {
        Some(target) => (target.run)(data),
        None => panic!("no fuzz target called {name}"),
    }
}

/// A value of `strategy` chosen by `seed` (its first 32 bytes): structure-
/// aware fuzzing through the SDK's proptest strategies.
pub(crate) fn generate<T: std::fmt::Debug>(
    strategy: impl Strategy<Value = T>,
    seed: &[u8],
) -> Option<T> {
    let mut key = [0u8; 32];
    for (k, b) in key.iter_mut().zip(seed) {
        *k = *b;
    }
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &key);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    strategy.new_tree(&mut runner).ok().map(|t| t.current())
}

/// Calls `$f::<Slot>($args)` for the slot `$b` picks (in declaration
/// order, as the committed corpora were written).
macro_rules! by_slot {
    ($b:expr, $f:ident ( $($args:expr),* )) => {{
        let slot = gangway_plugin_sdk::Slot::DECLARED
            [usize::from($b) % gangway_plugin_sdk::Slot::COUNT];
        gangway_plugin_sdk::with_slot!(slot, |S| $f::<S>($($args),*))
    }};
}
pub(crate) use by_slot;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for t in ALL {
            assert_eq!(find(t.name).map(|f| f.name), Some(t.name));
        }
        let mut names: Vec<_> = ALL.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }

    #[test]
    fn generation_is_a_function_of_the_seed() {
        use gangway_plugin_sdk::testing::SlotViews;
        let fairness_view = gangway_plugin_sdk::Fairness::views;
        assert_eq!(
            generate(fairness_view(), b"abc"),
            generate(fairness_view(), b"abc")
        );
        assert_ne!(
            generate(fairness_view(), b"abc"),
            generate(fairness_view(), b"abd")
        );
    }
}
