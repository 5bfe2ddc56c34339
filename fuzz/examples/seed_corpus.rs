//! Writes the seed corpus of the binary fuzz targets under `fuzz/corpus/`
//! (the text targets' seeds are excerpts of real files, committed as they
//! are). Run once after a wire-format change:
//! `cargo run -p gangway-fuzz --example seed_corpus`.

use std::path::{Path, PathBuf};

use gangway_catalog as catalog;
use gangway_core::Slot;
use gangway_plugin_sdk::testing::SlotViews;
use gangway_plugin_sdk::with_slot;
use gangway_plugin_sdk::{Manifest, QueueOrder, SlotContract, wire};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The slots in the order the targets' first byte picks them.
const SLOTS: [Slot; Slot::COUNT] = Slot::DECLARED;

fn key(seed: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 32];
    for (a, b) in k.iter_mut().zip(seed) {
        *a = *b;
    }
    k
}

fn view_bytes<S: SlotContract + SlotViews>(seed: &[u8]) -> Vec<u8> {
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &key(seed));
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let view = S::views()
        .new_tree(&mut runner)
        .map(|t| t.current())
        .unwrap_or_default();
    let mut out = Vec::new();
    wire::encode_view_into::<S>(&view, &mut out);
    out
}

struct Writer {
    root: PathBuf,
    written: usize,
}

impl Writer {
    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), bytes)?;
        self.written += 1;
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut w = Writer {
        root: Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus"),
        written: 0,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(2026);
    let mut random = |n: usize| -> Vec<u8> { (0..n).map(|_| rng.random()).collect() };

    // policy_config: every policy of every slot, defaults and documented options.
    let examples: &[(&str, &str)] = &[
        (
            "delay",
            "widen_after_s = [60, 600]\nserver_factors = [1, 2, 4]",
        ),
        ("reserve", "after_s = 0"),
        ("fixed", "max_attempts = 3\nafter_s = 180"),
        ("failure-aware", "infra_after_s = 50\nprobe_s = 40"),
        ("example-smallest-first", "starve_after_s = 3600"),
        ("vc-quota", "lend = true"),
    ];
    for (s, slot) in SLOTS.iter().enumerate() {
        for (i, name) in catalog::names(*slot).iter().enumerate() {
            let head = [s as u8, i as u8];
            w.put("policy_config", &format!("{slot}-{name}"), &head)?;
            for (n, config) in examples.iter().filter(|(n, _)| n == name) {
                let mut bytes = head.to_vec();
                bytes.extend_from_slice(config.as_bytes());
                w.put("policy_config", &format!("{slot}-{n}-options"), &bytes)?;
            }
        }
    }

    // view_decode: real encoded views of every slot.
    for (s, slot) in SLOTS.iter().enumerate() {
        for k in 0..4u8 {
            let seed = [k, s as u8, 7];
            let bytes = with_slot!(*slot, |S| view_bytes::<S>(&seed));
            let mut input = vec![s as u8];
            input.extend(bytes);
            w.put("view_decode", &format!("{slot}-{k}"), &input)?;
        }
    }

    for (s, slot) in SLOTS.iter().enumerate() {
        let s = s as u8;
        for k in 0..3 {
            // wire_roundtrip: a slot and a seed.
            let mut input = vec![s];
            input.extend(random(32));
            w.put("wire_roundtrip", &format!("{slot}-{k}"), &input)?;
            // replies: raw bytes, and valid replies of each policy mutated.
            for mode in [0u8, 1, 3, 5] {
                let mut input = vec![s, mode];
                input.extend(random(32));
                input.extend(random(if mode == 0 { 24 } else { 2 * k }));
                w.put("replies", &format!("{slot}-{k}-mode{mode}"), &input)?;
            }
            // wasm replies: every echo mode.
            let configs: Vec<Vec<u8>> = vec![
                Vec::new(),
                vec![0x80],
                [vec![0x81], random(4)].concat(),
                [vec![0], random(12)].concat(),
                [vec![1], b"refused: not today".to_vec()].concat(),
                [
                    vec![2, 0],
                    64u32.to_le_bytes().to_vec(),
                    1u32.to_le_bytes().to_vec(),
                ]
                .concat(),
                [vec![3], random(8), vec![0]].concat(),
            ];
            for (c, config) in configs.iter().enumerate() {
                let mut input = vec![s];
                input.extend(random(32));
                input.extend(config);
                for target in ["wasm_replies_direct", "wasm_replies_component"] {
                    w.put(target, &format!("{slot}-{k}-echo{c}"), &input)?;
                }
            }
        }
    }

    // manifest: every queue order.
    for (name, order) in [
        ("all", QueueOrder::All),
        ("submit", QueueOrder::Submit),
        (
            "bands",
            QueueOrder::AttainedBands(vec![3_600, 36_000, 360_000]),
        ),
        ("smallest", QueueOrder::Smallest),
    ] {
        let m = Manifest {
            queue_order: order,
            ..Manifest::default()
        };
        w.put("manifest", name, &m.encode())?;
    }

    // scheduler_events: each policy set and window, random events.
    for which in 0..12u8 {
        let mut input = vec![which];
        input.extend(random(90));
        w.put("scheduler_events", &format!("run-{which}"), &input)?;
    }
    println!("wrote {} seed files under {}", w.written, w.root.display());
    Ok(())
}
