//! The reclaim slot's wire code: its view byte for byte as postcard writes
//! it, and as a change from the last one (the formats are in `crate::wire`;
//! its decision travels through serde).

use super::ReclaimView;
use crate::view::{RunningJob, ServerState, WaitingJob};
use crate::wire::change;
use crate::wire::codec::{self, U32, U64, WireError};
use crate::wire::postcard::{JOB_MAX, RUNNING_MAX, Reader, VC_MAX, cluster_max, write_sized};

/// Encodes a [`ReclaimView`] into `out` (cleared first), as postcard does.
pub(crate) fn encode_view(view: &ReclaimView, out: &mut Vec<u8>) {
    let ReclaimView {
        now_s,
        cluster,
        vcs,
        servers,
        running,
        waiting,
    } = view;
    let parts: usize = running.iter().map(|j| j.parts.len()).sum();
    let max = U64
        + cluster_max(cluster)
        + U64
        + vcs.len() * VC_MAX
        + U64
        + servers.len() * 4 * U32
        + U64
        + running.len() * RUNNING_MAX
        + parts * 2 * U32
        + U64
        + waiting.len() * (JOB_MAX + U32 + 1 + U32);
    let fits = write_sized(out, max, |w| {
        w.varint(*now_s);
        w.cluster_summary(cluster);
        w.vcs(vcs);
        w.varint(servers.len() as u64);
        for s in servers {
            w.server_state(s);
        }
        w.varint(running.len() as u64);
        for j in running {
            w.running_job(j);
        }
        w.varint(waiting.len() as u64);
        for wj in waiting {
            w.waiting_job(wj);
        }
    });
    if !fits {
        codec::encode_into(view, out);
    }
}

/// Decodes a [`ReclaimView`] into `view`, reusing its vectors' memory. After
/// an error `view` holds a partial decoding and must not be used.
pub(crate) fn decode_view_into(bytes: &[u8], view: &mut ReclaimView) -> Result<(), WireError> {
    let ReclaimView {
        now_s,
        cluster,
        vcs,
        servers,
        running,
        waiting,
    } = view;
    let mut r = Reader::new(bytes, "ReclaimView");
    *now_s = r.u64()?;
    r.cluster_summary(cluster)?;
    r.vcs(vcs)?;
    let n = r.len(4)?;
    servers.resize(n, ServerState::default());
    for s in servers.iter_mut() {
        r.server_state_into(s)?;
    }
    let n = r.len(9)?;
    running.resize(n, RunningJob::default());
    for j in running.iter_mut() {
        r.running_job_into(j)?;
    }
    let n = r.len(13)?;
    waiting.resize(n, WaitingJob::default());
    for w in waiting.iter_mut() {
        r.waiting_job_into(w)?;
    }
    r.finish()
}

/// Encodes `view` as a change from `base` into `out` (cleared first), or
/// returns `false` (leaving `out` unspecified) when the whole view is
/// about as short (always for fewer than [`MIN_ENTRIES`] entries in all).
pub(crate) fn encode_view_change(
    base: &ReclaimView,
    view: &ReclaimView,
    known: Option<&crate::wire::KnownChanges>,
    out: &mut Vec<u8>,
) -> bool {
    let ReclaimView {
        now_s,
        cluster,
        vcs,
        servers,
        running,
        waiting,
    } = view;
    let entries = vcs.len() + servers.len() + running.len() + waiting.len();
    if entries < change::MIN_ENTRIES {
        return false;
    }
    let dt = now_s.wrapping_sub(base.now_s);
    change::DIFF.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        scratch.runs.clear();
        let mut literal = change::diff_list(&base.vcs, vcs, dt, known, scratch);
        let a = scratch.runs.len();
        literal += change::diff_list(&base.servers, servers, dt, known, scratch);
        let b = scratch.runs.len();
        literal += change::diff_list(&base.running, running, dt, known, scratch);
        let c = scratch.runs.len();
        literal += change::diff_list(&base.waiting, waiting, dt, known, scratch);
        if !change::worth(literal, entries) {
            return false;
        }
        let runs = &scratch.runs;
        let (vc_runs, server_runs, running_runs, waiting_runs) =
            (&runs[..a], &runs[a..b], &runs[b..c], &runs[c..]);
        let max = U64
            + cluster_max(cluster)
            + change::runs_max(vc_runs, vcs, 0)
            + change::runs_max(server_runs, servers, 0)
            + change::runs_max(running_runs, running, 0)
            + change::runs_max(waiting_runs, waiting, 0);
        write_sized(out, max, |w| {
            w.varint(*now_s);
            w.cluster_summary(cluster);
            w.runs(vc_runs, vcs, None);
            w.runs(server_runs, servers, None);
            w.runs(running_runs, running, None);
            w.runs(waiting_runs, waiting, None);
        })
    })
}

/// Applies a change to `view`, which holds its base. After an error `view`
/// holds a partial result and must not be used.
pub(crate) fn apply_view_change(bytes: &[u8], view: &mut ReclaimView) -> Result<(), WireError> {
    let ReclaimView {
        now_s,
        cluster,
        vcs,
        servers,
        running,
        waiting,
    } = view;
    let mut r = Reader::new(bytes, "ReclaimView change");
    let now = r.u64()?;
    let dt = now.wrapping_sub(*now_s);
    *now_s = now;
    r.cluster_summary(cluster)?;
    change::apply_runs(&mut r, vcs, None, dt)?;
    change::apply_runs(&mut r, servers, None, dt)?;
    change::apply_runs(&mut r, running, None, dt)?;
    change::apply_runs(&mut r, waiting, None, dt)?;
    r.finish()
}
