//! The Rust side of the byte-equality tests of the pure-Python wire codec
//! (`gangway.wire`): views the conformance kit generates with the answers
//! of each slot's built-in policy, as the SDK's postcard bytes, and the
//! SDK's reading and re-writing of bytes the Python codec wrote.

use gangway_plugin_sdk::testing::SlotViews;
use gangway_plugin_sdk::{Policy, SlotContract, wire};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors;
use crate::policy::slot;

/// `cases` views of `slot` from the kit's strategy (seeded: the same seed
/// gives the same views), each with the slot's built-in decision for it,
/// as `(view, decision)` postcard bytes.
#[pyfunction]
#[pyo3(signature = (slot_name, cases = 32, seed = 1))]
pub(crate) fn wire_samples<'py>(
    py: Python<'py>,
    slot_name: &str,
    cases: u32,
    seed: u64,
) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let samples = gangway_plugin_sdk::with_slot!(slot(slot_name)?, |S| samples::<S>(cases, seed));
    Ok(samples
        .into_iter()
        .map(|(view, decision)| (PyBytes::new(py, &view), PyBytes::new(py, &decision)))
        .collect())
}

fn samples<S: SlotViews>(cases: u32, seed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let strategy = S::views();
    let fallback = S::Fallback::default();
    (0..cases)
        .filter_map(|_| strategy.new_tree(&mut runner).ok())
        .map(|tree| {
            let view = tree.current();
            let decision = fallback.decide(&view);
            (wire::encode(&view), wire::encode(&decision))
        })
        .collect()
}

/// Reads `data` as the view (`kind="view"`) or decision of `slot` with the
/// SDK and writes it again: the bytes back if the Python codec wrote what
/// the SDK writes. Bytes that do not read raise `PolicyError`.
#[pyfunction]
pub(crate) fn wire_reencode<'py>(
    py: Python<'py>,
    slot_name: &str,
    kind: &str,
    data: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let again = gangway_plugin_sdk::with_slot!(slot(slot_name)?, |S| reencode::<S>(kind, data))?;
    Ok(PyBytes::new(py, &again))
}

fn reencode<S: SlotContract>(kind: &str, data: &[u8]) -> PyResult<Vec<u8>> {
    let failed = |e: wire::WireError| errors::PolicyError::new_err(format!("{}: {e}", S::NAME));
    match kind {
        "view" => Ok(wire::encode(
            &wire::decode::<S::View>(data).map_err(failed)?,
        )),
        "decision" => Ok(wire::encode(
            &wire::decode::<S::Decision>(data).map_err(failed)?,
        )),
        other => Err(errors::PolicyError::new_err(format!(
            "kind {other:?} is neither \"view\" nor \"decision\""
        ))),
    }
}
