//! Bulk views as changes from the last one: what the host sends a module
//! whose glue asks for it (the manifest's `view_changes`, which the SDK's
//! export glue sets). A backlog that stands from round to round then costs
//! the jobs and VCs that changed, not every entry encoded by the host and
//! decoded in the sandbox again. Views of fewer than 16 entries travel
//! whole.
//!
//! A change of a fairness view ([`FairnessView`]) is its `now_s` and `cluster`
//! whole, then its `vcs` and its jobs as runs. A change of a locality or
//! gang view ([`QueueView`]) is its `now_s` and `cluster`, a byte saying
//! whether each job's spread limit travels with it (1: both views have one
//! limit per job) or the limits follow whole after the runs (0), then the
//! runs. A change of a reclaim view ([`ReclaimView`]) is its `now_s` and
//! `cluster` whole, then its VCs, servers, running jobs and waiting jobs,
//! each list as runs.
//!
//! A list's runs start with a varint `count << 1 | in_place`, then `count`
//! runs. A run is a varint header `count << 1 | kind`:
//! - kind 0, *keep*: a varint `from`; the base's entries `from..from +
//!   count` (and their limits, when they travel with the jobs), each
//!   advanced by the time between the two views (`dt = now_s - base.now_s`,
//!   wrapping): a pending or waiting job's `waiting_s` by `dt`, a running
//!   job's `attained_gpu_s` by `gpus * dt`, a server or a VC not at all;
//! - kind 1, *new*: `count` entries follow in full, each job followed by its
//!   limit when limits travel with the jobs.
//!
//! `in_place` (1) promises that every keep run starts at or after both the
//! position its first entry takes in the new list and the end of the keep
//! run before it (entries only left, changed or arrived, in order): the
//! guest then rebuilds the list inside the base's memory, without a second
//! list. A run that breaks the promise does not decode.
//!
//! The keep runs of a list together copy at most as many entries as the
//! base has, and a new run is refused when the bytes left cannot hold it, so
//! a change never makes the guest build more than the base plus what its
//! bytes carry.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::codec::{U32, U64, WireError};
use super::known::KnownChanges;
use super::postcard::{JOB_MAX, RUNNING_MAX, Reader, VC_MAX, Writer};
use crate::view::{PendingJob, RunningJob, ServerState, SpreadLimit, VcUsage, WaitingJob};

/// Where the entries of the new list come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Run {
    /// The base's entries `from..from + count`.
    Keep { from: usize, count: usize },
    /// The new list's entries `from..from + count`, sent in full.
    New { from: usize, count: usize },
}

/// How far past the expected base entry the diff looks for an entry before
/// it asks the index (a few jobs started or left the view there).
const LOOKAHEAD: usize = 16;

thread_local! {
    /// The diff's scratch: its runs and the base's index by key (built
    /// only when an entry is not where the diff expects it).
    pub(crate) static DIFF: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The diff's scratch: its runs, and the base's positions by key.
#[derive(Default)]
pub(crate) struct Scratch {
    pub(crate) runs: Vec<Run>,
    index: HashMap<u64, usize, BuildHasherDefault<IdHasher>>,
}

/// A multiplicative hash for job and server ids (the index is rebuilt per
/// view; it needs speed, not resistance to chosen keys: the host builds it
/// from its own views).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// An entry of a list that a view change carries as runs.
pub(crate) trait Kept: Default {
    /// The fewest bytes it takes on the wire.
    const MIN_BYTES: usize;
    /// Its id: how the diff finds it when it moved.
    fn key(&self) -> u64;
    /// Whether `self`, `dt` seconds later, is `new`.
    fn later_is(&self, new: &Self, dt: u64) -> bool;
    /// Whether `self`, later, is `new` as far as `known` tells: the same
    /// id, not among the changes (lists the host does not track compare
    /// their entries whole, as [`Kept::later_is`] does).
    fn later_is_known(&self, new: &Self, dt: u64, known: &KnownChanges) -> bool;
    /// `self`, `dt` seconds later.
    fn advance(&mut self, dt: u64);
    /// The most bytes it takes on the wire.
    fn max_bytes(&self) -> usize;
    /// Writes it.
    fn write(&self, w: &mut Writer<'_>);
    /// Reads it over `self`, reusing its memory.
    fn read(&mut self, r: &mut Reader<'_>) -> Result<(), WireError>;
}

impl Kept for PendingJob {
    const MIN_BYTES: usize = 10;
    fn key(&self) -> u64 {
        self.id.0
    }
    #[inline(always)]
    fn later_is(&self, new: &Self, dt: u64) -> bool {
        let PendingJob {
            id,
            vc,
            user,
            gpus,
            submitted_s,
            waiting_s,
            attempts,
            attained_gpu_s,
            min_level,
            min_servers,
        } = self;
        // Without short-circuits: one branch per job, not one per field.
        (*id == new.id)
            & (waiting_s.wrapping_add(dt) == new.waiting_s)
            & (*vc == new.vc)
            & (*user == new.user)
            & (*gpus == new.gpus)
            & (*submitted_s == new.submitted_s)
            & (*attempts == new.attempts)
            & (*attained_gpu_s == new.attained_gpu_s)
            & (*min_level == new.min_level)
            & (*min_servers == new.min_servers)
    }
    #[inline(always)]
    fn later_is_known(&self, new: &Self, dt: u64, known: &KnownChanges) -> bool {
        // The wait is compared: it follows the clock only once the job's
        // pending time has come (a host may submit ahead of its clock).
        (self.id == new.id) & (self.waiting_s.wrapping_add(dt) == new.waiting_s)
            && !known.job_changed(self.id)
    }
    fn advance(&mut self, dt: u64) {
        self.waiting_s = self.waiting_s.wrapping_add(dt);
    }
    fn max_bytes(&self) -> usize {
        JOB_MAX
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.pending_job(self);
    }
    fn read(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        r.pending_job_into(self)
    }
}

impl Kept for VcUsage {
    const MIN_BYTES: usize = 7;
    fn key(&self) -> u64 {
        u64::from(self.id.0)
    }
    fn later_is(&self, new: &Self, _dt: u64) -> bool {
        // A VC's attained service grows when an attempt ends, not with time.
        self == new
    }
    fn later_is_known(&self, new: &Self, _dt: u64, known: &KnownChanges) -> bool {
        self.id == new.id && !known.vc_changed(self.id)
    }
    fn advance(&mut self, _dt: u64) {}
    fn max_bytes(&self) -> usize {
        VC_MAX
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.vc(self);
    }
    fn read(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        r.vc_into(self)
    }
}

impl Kept for ServerState {
    const MIN_BYTES: usize = 4;
    fn key(&self) -> u64 {
        u64::from(self.id.0)
    }
    fn later_is(&self, new: &Self, _dt: u64) -> bool {
        self == new
    }
    fn later_is_known(&self, new: &Self, _dt: u64, _known: &KnownChanges) -> bool {
        // Hosts do not track servers: a server is compared whole.
        self == new
    }
    fn advance(&mut self, _dt: u64) {}
    fn max_bytes(&self) -> usize {
        4 * U32
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.server_state(self);
    }
    fn read(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        r.server_state_into(self)
    }
}

impl Kept for RunningJob {
    const MIN_BYTES: usize = 9;
    fn key(&self) -> u64 {
        self.id.0
    }
    fn later_is(&self, new: &Self, dt: u64) -> bool {
        let RunningJob {
            id,
            vc,
            user,
            gpus,
            submitted_s,
            started_s,
            attempts,
            attained_gpu_s,
            parts,
        } = self;
        *id == new.id
            && attained_gpu_s.wrapping_add(u64::from(*gpus).wrapping_mul(dt)) == new.attained_gpu_s
            && *vc == new.vc
            && *user == new.user
            && *gpus == new.gpus
            && *submitted_s == new.submitted_s
            && *started_s == new.started_s
            && *attempts == new.attempts
            && *parts == new.parts
    }
    fn later_is_known(&self, new: &Self, dt: u64, known: &KnownChanges) -> bool {
        let advanced = self
            .attained_gpu_s
            .wrapping_add(u64::from(self.gpus).wrapping_mul(dt));
        (self.id == new.id) & (advanced == new.attained_gpu_s) && !known.job_changed(self.id)
    }
    fn advance(&mut self, dt: u64) {
        self.attained_gpu_s = self
            .attained_gpu_s
            .wrapping_add(u64::from(self.gpus).wrapping_mul(dt));
    }
    fn max_bytes(&self) -> usize {
        RUNNING_MAX + self.parts.len() * 2 * U32
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.running_job(self);
    }
    fn read(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        r.running_job_into(self)
    }
}

impl Kept for WaitingJob {
    const MIN_BYTES: usize = 13;
    fn key(&self) -> u64 {
        self.job.id.0
    }
    fn later_is(&self, new: &Self, dt: u64) -> bool {
        self.job.later_is(&new.job, dt) && self.reason == new.reason && self.limit == new.limit
    }
    fn later_is_known(&self, new: &Self, dt: u64, known: &KnownChanges) -> bool {
        // The reason and limit are the round's, not the host's state.
        self.job.later_is_known(&new.job, dt, known)
            && self.reason == new.reason
            && self.limit == new.limit
    }
    fn advance(&mut self, dt: u64) {
        self.job.advance(dt);
    }
    fn max_bytes(&self) -> usize {
        JOB_MAX + U32 + 1 + U32
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.waiting_job(self);
    }
    fn read(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        r.waiting_job_into(self)
    }
}

/// One side of a diff: a list, and its jobs' spread limits (one per entry
/// when limits travel with the jobs; else unused).
#[derive(Clone, Copy)]
pub(crate) struct Side<'a, T> {
    pub(crate) list: &'a [T],
    pub(crate) spread: &'a [SpreadLimit],
}

/// How many entries at the start of `new` are those of `base`, `dt`
/// seconds later (with the same limits when `paired`), as far as `known`
/// tells when the host knows its changes.
fn unchanged<T: Kept>(
    base: Side<'_, T>,
    new: Side<'_, T>,
    paired: bool,
    dt: u64,
    known: Option<&KnownChanges>,
) -> usize {
    let (old, now) = (base.list, new.list);
    let n = old.len().min(now.len());
    let mut at = 0;
    match known {
        Some(known) => {
            while at < n && old[at].later_is_known(&now[at], dt, known) {
                at += 1;
            }
        }
        None => {
            while at < n && old[at].later_is(&now[at], dt) {
                at += 1;
            }
        }
    }
    if paired {
        at = base.spread[..at]
            .iter()
            .zip(&new.spread[..at])
            .take_while(|(a, b)| a == b)
            .count();
    }
    at
}

/// Appends the runs that build `new` from `base` (with their limits when
/// `paired`), `dt` seconds later, to `scratch.runs`; returns how many
/// entries travel in full. With `known`, an entry is kept when its id is
/// not among the changes, unread.
pub(crate) fn diff<T: Kept>(
    base: Side<'_, T>,
    new: Side<'_, T>,
    paired: bool,
    dt: u64,
    known: Option<&KnownChanges>,
    scratch: &mut Scratch,
) -> usize {
    let Scratch { runs, index } = scratch;
    index.clear();
    // This list's runs: only they may be merged with.
    let first = runs.len();
    let same = |b: usize, n: usize| {
        let entry = match known {
            Some(known) => base.list[b].later_is_known(&new.list[n], dt, known),
            None => base.list[b].later_is(&new.list[n], dt),
        };
        entry && (!paired || base.spread[b] == new.spread[n])
    };
    let mut next = 0;
    let mut literal = 0;
    let mut n = 0;
    // Whether the base is sorted by key, once a search needs to know.
    let mut by_key: Option<bool> = None;
    while n < new.list.len() {
        // The common case first: a stretch of entries unchanged but for time.
        let stretch = unchanged(
            Side {
                list: &base.list[next..],
                spread: if paired { &base.spread[next..] } else { &[] },
            },
            Side {
                list: &new.list[n..],
                spread: if paired { &new.spread[n..] } else { &[] },
            },
            paired,
            dt,
            known,
        );
        if stretch > 0 {
            match runs[first..].last_mut() {
                Some(Run::Keep { from, count }) if *from + *count == next => *count += stretch,
                _ => runs.push(Run::Keep {
                    from: next,
                    count: stretch,
                }),
            }
            next += stretch;
            n += stretch;
            continue;
        }
        let key = new.list[n].key();
        if base.list.get(next).is_some_and(|b| b.key() == key) {
            // The entry where the diff expects it, changed: it travels in
            // full, in its place.
            match runs[first..].last_mut() {
                Some(Run::New { count, .. }) => *count += 1,
                _ => runs.push(Run::New { from: n, count: 1 }),
            }
            literal += 1;
            next += 1;
            n += 1;
            continue;
        }
        let found = if next < base.list.len() && same(next, n) {
            Some(next)
        } else {
            let ahead = (next + 1..base.list.len().min(next + LOOKAHEAD))
                .find(|&b| base.list[b].key() == key)
                .filter(|&b| same(b, n));
            ahead.or_else(|| {
                // Lists the host sorts by key (VCs, servers, running jobs)
                // are searched; any other gets an index.
                let sorted = *by_key.get_or_insert_with(|| base.list.is_sorted_by_key(T::key));
                let at = if sorted {
                    base.list.binary_search_by_key(&key, T::key).ok()
                } else {
                    if index.is_empty() && !base.list.is_empty() {
                        index.reserve(base.list.len());
                        for (b, e) in base.list.iter().enumerate() {
                            index.insert(e.key(), b);
                        }
                    }
                    index.get(&key).copied()
                };
                at.filter(|&b| same(b, n))
            })
        };
        match (found, runs[first..].last_mut()) {
            (Some(b), Some(Run::Keep { from, count })) if *from + *count == b => *count += 1,
            (Some(b), _) => runs.push(Run::Keep { from: b, count: 1 }),
            (None, Some(Run::New { count, .. })) => {
                *count += 1;
                literal += 1;
            }
            (None, _) => {
                runs.push(Run::New { from: n, count: 1 });
                literal += 1;
            }
        }
        if let Some(b) = found {
            next = b + 1;
        }
        n += 1;
    }
    literal
}

/// [`diff`] of two lists without limits.
pub(crate) fn diff_list<T: Kept>(
    base: &[T],
    new: &[T],
    dt: u64,
    known: Option<&KnownChanges>,
    scratch: &mut Scratch,
) -> usize {
    let bare = |list| Side { list, spread: &[] };
    diff(bare(base), bare(new), false, dt, known, scratch)
}

/// Whether `runs` can rebuild their list inside the base's memory: every
/// keep run starts at or after both where its entries go and the end of
/// the keep run before it (see the module docs).
fn in_place(runs: &[Run]) -> bool {
    let (mut out, mut kept_to) = (0, 0);
    for run in runs {
        match *run {
            Run::Keep { from, count } => {
                if from < out || from < kept_to {
                    return false;
                }
                out += count;
                kept_to = from + count;
            }
            Run::New { count, .. } => out += count,
        }
    }
    true
}

impl Writer<'_> {
    /// Writes `runs`, the entries of new runs in full (jobs with their
    /// limits when `spread` travels with them).
    pub(crate) fn runs<T: Kept>(
        &mut self,
        runs: &[Run],
        list: &[T],
        spread: Option<&[SpreadLimit]>,
    ) {
        self.varint(((runs.len() as u64) << 1) | u64::from(in_place(runs)));
        for run in runs {
            match *run {
                Run::Keep { from, count } => {
                    self.varint((count as u64) << 1);
                    self.varint(from as u64);
                }
                Run::New { from, count } => {
                    self.varint(((count as u64) << 1) | 1);
                    for n in from..from + count {
                        list[n].write(self);
                        if let Some(spread) = spread {
                            self.spread_limit(spread[n]);
                        }
                    }
                }
            }
        }
    }
}

/// Views with fewer entries than this (jobs, and VCs, servers and running
/// jobs where the view has them) travel whole. Sending smaller views as
/// changes too (RFold's fairness views: about 11 VCs and a job or two)
/// moved decoding out of the guest but as much diffing into the host: the
/// replay's Wasm loop did not change measurably.
pub(crate) const MIN_ENTRIES: usize = 16;

/// Whether a change with `literal` of `entries` entries in full is worth
/// sending rather than the whole view.
pub(crate) fn worth(literal: usize, entries: usize) -> bool {
    entries >= MIN_ENTRIES && literal * 2 <= entries
}

/// The most bytes `runs` take, with the new entries of `list` in full
/// (`extra` more bytes each).
pub(crate) fn runs_max<T: Kept>(runs: &[Run], list: &[T], extra: usize) -> usize {
    let new: usize = runs
        .iter()
        .map(|r| match *r {
            Run::Keep { .. } => 0,
            Run::New { from, count } => list[from..from + count]
                .iter()
                .map(|e| e.max_bytes() + extra)
                .sum(),
        })
        .sum();
    U64 + runs.len() * 2 * U64 + new
}

/// Rebuilds `list` (and `spread`, when limits travel with the jobs) from
/// the runs `r` holds: in place when the runs say they allow it, else into
/// a new list (kept entries moved out of the base, not copied).
pub(crate) fn apply_runs<T: Kept>(
    r: &mut Reader<'_>,
    list: &mut Vec<T>,
    spread: Option<&mut Vec<SpreadLimit>>,
    dt: u64,
) -> Result<(), WireError> {
    let header = r.u64()?;
    let n = usize::try_from(header >> 1).unwrap_or(usize::MAX);
    r.room_for(n, 2)?;
    if header & 1 == 1 {
        apply_runs_in_place(r, n, list, spread, dt)
    } else {
        apply_runs_moving(r, n, list, spread, dt)
    }
}

/// The `n` runs of an in-place list (see the module docs): kept entries
/// slide left over the entries that left, new entries overwrite the base's
/// in their place or follow at the end.
fn apply_runs_in_place<T: Kept>(
    r: &mut Reader<'_>,
    n: usize,
    list: &mut Vec<T>,
    mut spread: Option<&mut Vec<SpreadLimit>>,
    dt: u64,
) -> Result<(), WireError> {
    let (mut out, mut kept_to) = (0usize, 0usize);
    for _ in 0..n {
        let header = r.u64()?;
        let count = usize::try_from(header >> 1).unwrap_or(usize::MAX);
        if header & 1 == 0 {
            let from = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
            let end = match from.checked_add(count) {
                Some(end) if end <= list.len() => end,
                _ => return Err(r.error("keep run past the base view")),
            };
            if from < out || from < kept_to {
                return Err(r.error("keep run out of place in an in-place list"));
            }
            if from > out {
                // Entries before `from` left; those before `out` are final.
                for k in 0..count {
                    list.swap(out + k, from + k);
                }
                if let Some(spread) = spread.as_deref_mut() {
                    for k in 0..count {
                        spread.swap(out + k, from + k);
                    }
                }
            }
            for e in &mut list[out..out + count] {
                e.advance(dt);
            }
            out += count;
            kept_to = end;
        } else {
            let each = if spread.is_some() {
                T::MIN_BYTES + 2
            } else {
                T::MIN_BYTES
            };
            r.room_for(count, each)?;
            for _ in 0..count {
                if let Some(e) = list.get_mut(out) {
                    e.read(r)?;
                } else {
                    let mut e = T::default();
                    e.read(r)?;
                    list.push(e);
                }
                if let Some(spread) = spread.as_deref_mut() {
                    let limit = r.spread_limit()?;
                    match spread.get_mut(out) {
                        Some(s) => *s = limit,
                        None => spread.push(limit),
                    }
                }
                out += 1;
            }
        }
    }
    list.truncate(out);
    if let Some(spread) = spread {
        spread.truncate(out);
    }
    Ok(())
}

/// The `n` runs of a list whose entries may move: rebuilt into a new list.
fn apply_runs_moving<T: Kept>(
    r: &mut Reader<'_>,
    n: usize,
    list: &mut Vec<T>,
    spread: Option<&mut Vec<SpreadLimit>>,
    dt: u64,
) -> Result<(), WireError> {
    let mut next: Vec<T> = Vec::new();
    let mut next_spread = Vec::new();
    let mut kept = 0usize;
    for _ in 0..n {
        let header = r.u64()?;
        let count = usize::try_from(header >> 1).unwrap_or(usize::MAX);
        if header & 1 == 0 {
            let from = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
            kept = kept.saturating_add(count);
            let end = match from.checked_add(count) {
                Some(end) if end <= list.len() && kept <= list.len() => end,
                _ => return Err(r.error("keep run past the base view")),
            };
            if next.capacity() == 0 {
                next.reserve(list.len());
            }
            let start = next.len();
            next.extend(list[from..end].iter_mut().map(std::mem::take));
            for e in &mut next[start..] {
                e.advance(dt);
            }
            if let Some(spread) = &spread {
                next_spread.extend_from_slice(&spread[from..end]);
            }
        } else {
            let each = if spread.is_some() {
                T::MIN_BYTES + 2
            } else {
                T::MIN_BYTES
            };
            r.room_for(count, each)?;
            for _ in 0..count {
                let mut e = T::default();
                e.read(r)?;
                next.push(e);
                if spread.is_some() {
                    next_spread.push(r.spread_limit()?);
                }
            }
        }
    }
    *list = next;
    if let Some(spread) = spread {
        *spread = next_spread;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{Fairness, Locality, Reclaim, SlotContract};

    use crate::view::SpreadLimit;

    use crate::WaitReason;
    use crate::ids::{JobId, Level};
    use crate::slots::{FairnessView, QueueView, ReclaimView};
    use crate::testing::strategy;

    /// How a view changes between two rounds: jobs leave, arrive, change,
    /// move, and time passes.
    #[derive(Clone, Debug)]
    enum Edit {
        Remove(usize),
        Insert(usize, PendingJob),
        Change(usize, u32),
        Move(usize, usize),
        Limit(usize, u8),
    }

    fn edits() -> impl Strategy<Value = Vec<Edit>> {
        let edit = prop_oneof![
            3 => any::<usize>().prop_map(Edit::Remove),
            2 => (any::<usize>(), any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(at, id, gpus, waiting_s)| {
                Edit::Insert(at, PendingJob { id: JobId(id % 64), gpus, waiting_s, ..PendingJob::default() })
            }),
            2 => (any::<usize>(), any::<u32>()).prop_map(|(at, g)| Edit::Change(at, g)),
            1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Move(a, b)),
            1 => (any::<usize>(), any::<u8>()).prop_map(|(a, l)| Edit::Limit(a, l)),
        ];
        prop::collection::vec(edit, 0..40)
    }

    /// `jobs` and `spread` (one limit per job, or none) after `edits`, `dt`
    /// seconds later, and the ids of the jobs the edits changed or added
    /// (what a host that tracks its changes knows).
    fn edited(
        jobs: &[PendingJob],
        spread: &[SpreadLimit],
        edits: &[Edit],
        dt: u64,
    ) -> (Vec<PendingJob>, Vec<SpreadLimit>, KnownChanges) {
        let mut known = KnownChanges::default();
        let paired = spread.len() == jobs.len();
        let mut pairs: Vec<(PendingJob, SpreadLimit)> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let mut j = *j;
                j.waiting_s = j.waiting_s.wrapping_add(dt);
                (j, spread.get(i).copied().unwrap_or_default())
            })
            .collect();
        for e in edits {
            let len = pairs.len();
            match e {
                Edit::Remove(at) if len > 0 => {
                    pairs.remove(at % len);
                }
                Edit::Insert(at, j) => {
                    known.add_job(j.id);
                    pairs.insert(at % (len + 1), (*j, SpreadLimit::default()));
                }
                Edit::Change(at, g) if len > 0 => {
                    known.add_job(pairs[at % len].0.id);
                    pairs[at % len].0.gpus = *g;
                }
                Edit::Move(a, b) if len > 0 => {
                    let p = pairs.remove(a % len);
                    pairs.insert(b % len, p);
                }
                Edit::Limit(at, l) if len > 0 => pairs[at % len].1.level = Level(*l),
                _ => {}
            }
        }
        let spread = if paired {
            pairs.iter().map(|p| p.1).collect()
        } else {
            spread.to_vec()
        };
        known.seal();
        (pairs.into_iter().map(|p| p.0).collect(), spread, known)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Whatever changed, the base plus the change is the new view.
        #[test]
        fn a_change_rebuilds_the_round_view(
            base in strategy::fairness_view(),
            edits in edits(),
            vc_edits in prop::collection::vec((any::<usize>(), any::<u32>()), 0..4),
            dt in prop_oneof![Just(0u64), 1u64..100_000, Just(u64::MAX)],
        ) {
            let (jobs, _, mut known) = edited(&base.jobs, &[], &edits, dt);
            let mut vcs = base.vcs.clone();
            for (at, held) in &vc_edits {
                let n = vcs.len();
                if let Some(v) = vcs.get_mut(at % n.max(1)) {
                    v.held_gpus = *held;
                    known.add_vc(v.id);
                }
            }
            known.seal();
            let view = FairnessView { now_s: base.now_s.wrapping_add(dt), jobs, vcs, ..base.clone() };
            let mut bytes = vec![0xAA; 5];
            if Fairness::encode_view_change(&base, &view, None, &mut bytes) {
                let mut held = base.clone();
                Fairness::apply_view_change(&bytes, &mut held).unwrap();
                prop_assert_eq!(&held, &view);
            } else {
                // Only a small view travels whole when nothing but time passed.
                prop_assert!(
                    !edits.is_empty()
                        || !vc_edits.is_empty()
                        || view.jobs.len() + view.vcs.len() < MIN_ENTRIES
                );
            }
            // Told what changed, the host keeps the rest unread: the same view.
            let mut message = Vec::new();
            crate::wire::encode_view_message_known::<Fairness>(Some(&base), &view, Some(&known), &mut message);
            let mut held = base.clone();
            crate::wire::decode_view_message::<Fairness>(&message, &mut held).unwrap();
            prop_assert_eq!(held, view);
        }

        /// The same for locality and gang views, with limits that travel
        /// with the jobs or whole.
        #[test]
        fn a_change_rebuilds_the_queue_view(
            base in strategy::queue_view(true),
            edits in edits(),
            dt in prop_oneof![Just(0u64), 1u64..100_000],
        ) {
            let (jobs, spread, known) = edited(&base.jobs, &base.spread, &edits, dt);
            let view = QueueView { now_s: base.now_s.wrapping_add(dt), jobs, spread, ..base.clone() };
            for known in [None, Some(&known)] {
                let mut bytes = Vec::new();
                if Locality::encode_view_change(&base, &view, known, &mut bytes) {
                    let mut held = base.clone();
                    Locality::apply_view_change(&bytes, &mut held).unwrap();
                    prop_assert_eq!(held, view.clone());
                }
            }
        }

        /// And for reclaim views: servers, running and waiting jobs, each
        /// list as runs, with running jobs' attained service advanced.
        #[test]
        fn a_change_rebuilds_the_reclaim_view(
            base in strategy::reclaim_view(),
            drop_running in any::<usize>(),
            drop_waiting in any::<usize>(),
            freed in any::<usize>(),
            dt in prop_oneof![Just(0u64), 1u64..100_000],
        ) {
            let mut view = base.clone();
            view.now_s = base.now_s.wrapping_add(dt);
            for j in &mut view.running {
                j.advance(dt);
            }
            for w in &mut view.waiting {
                w.advance(dt);
            }
            if !view.running.is_empty() {
                view.running.remove(drop_running % base.running.len());
            }
            if !view.waiting.is_empty() {
                let at = drop_waiting % view.waiting.len();
                view.waiting[at].reason = WaitReason::NoCapacity;
            }
            if !view.servers.is_empty() {
                let at = freed % view.servers.len();
                view.servers[at].free += 1;
            }
            // Nothing the host tracks changed (a job left, a reason and a
            // server's free GPUs changed): told so, the change is the same.
            let none = KnownChanges::default();
            let mut known = Vec::new();
            if Reclaim::encode_view_change(&base, &view, Some(&none), &mut known) {
                let mut held = base.clone();
                Reclaim::apply_view_change(&known, &mut held).unwrap();
                prop_assert_eq!(&held, &view);
            }
            let mut bytes = Vec::new();
            if Reclaim::encode_view_change(&base, &view, None, &mut bytes) {
                let mut held = base.clone();
                Reclaim::apply_view_change(&bytes, &mut held).unwrap();
                prop_assert_eq!(held, view);
            } else {
                let entries =
                    view.vcs.len() + view.servers.len() + view.running.len() + view.waiting.len();
                prop_assert!(entries < MIN_ENTRIES, "{} entries", entries);
            }
            let mut held = base.clone();
            let _ = Reclaim::apply_view_change(&bytes, &mut held);
        }

        /// On arbitrary bytes over any base the guest's side never panics,
        /// and never builds more jobs than the base and the bytes hold.
        #[test]
        fn garbage_changes_are_refused_or_bounded(
            base in strategy::queue_view(true),
            bytes in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut held = base.clone();
            if Locality::apply_view_change(&bytes, &mut held).is_ok() {
                prop_assert!(held.jobs.len() <= base.jobs.len() + bytes.len() / PendingJob::MIN_BYTES);
            }
            let mut round = FairnessView { jobs: base.jobs.clone(), ..FairnessView::default() };
            if Fairness::apply_view_change(&bytes, &mut round).is_ok() {
                prop_assert!(round.jobs.len() <= base.jobs.len() + bytes.len() / PendingJob::MIN_BYTES);
            }
        }
    }

    /// A reclaim view a minute later, one running job gone: a few bytes,
    /// and the running jobs' attained service advanced by their GPUs.
    #[test]
    fn a_reclaim_view_a_minute_later() {
        let base = ReclaimView {
            now_s: 1_000,
            servers: (0..20)
                .map(|i| ServerState {
                    id: crate::ServerId(i),
                    domain: i / 4,
                    gpus: 8,
                    free: i % 3,
                })
                .collect(),
            running: (0..30)
                .map(|i| RunningJob {
                    id: JobId(i),
                    gpus: 2,
                    attained_gpu_s: 100 * i,
                    parts: vec![(crate::ServerId(i as u32 % 20), 2)],
                    ..RunningJob::default()
                })
                .collect(),
            ..ReclaimView::default()
        };
        let mut view = base.clone();
        view.now_s = 1_060;
        view.running.remove(7);
        for j in &mut view.running {
            j.attained_gpu_s += 120;
        }
        let mut bytes = Vec::new();
        assert!(Reclaim::encode_view_change(&base, &view, None, &mut bytes));
        assert!(bytes.len() < 24, "{} bytes", bytes.len());
        let mut held = base.clone();
        Reclaim::apply_view_change(&bytes, &mut held).unwrap();
        assert_eq!(held, view);
    }

    /// A standing backlog a second later costs a few bytes, and jobs that
    /// started leave a gap that the next keep run jumps.
    #[test]
    fn a_standing_backlog_costs_a_few_bytes() {
        let base = FairnessView {
            now_s: 100,
            jobs: (0..1_000)
                .map(|i| PendingJob {
                    id: JobId(i),
                    gpus: 1,
                    waiting_s: i,
                    ..PendingJob::default()
                })
                .collect(),
            ..FairnessView::default()
        };
        let mut view = base.clone();
        view.now_s = 101;
        for j in &mut view.jobs {
            j.waiting_s += 1;
        }
        let mut bytes = Vec::new();
        assert!(Fairness::encode_view_change(&base, &view, None, &mut bytes));
        assert!(bytes.len() < 16, "{} bytes", bytes.len());
        view.jobs.drain(100..140);
        assert!(Fairness::encode_view_change(&base, &view, None, &mut bytes));
        assert!(bytes.len() < 20, "{} bytes", bytes.len());
        let mut held = base.clone();
        Fairness::apply_view_change(&bytes, &mut held).unwrap();
        assert_eq!(held, view);
        // A change whose keep runs copy more than the base holds is refused.
        // (now, cluster, no VC runs, then two runs that each keep job 0.)
        let bad = [0, 0, 0, 0, 0, 0, 4, 2, 0, 2, 0];
        let mut small = FairnessView {
            jobs: vec![PendingJob::default()],
            ..FairnessView::default()
        };
        let err = Fairness::apply_view_change(&bad, &mut small).unwrap_err();
        assert!(err.to_string().contains("past the base view"), "{err}");
        // One keep run copies it once.
        let mut small = FairnessView {
            jobs: vec![PendingJob::default()],
            ..FairnessView::default()
        };
        Fairness::apply_view_change(&[0, 0, 0, 0, 0, 0, 2, 2, 0], &mut small).unwrap();
        // In place, a keep run that reaches back before the last one is refused.
        let mut two = FairnessView {
            jobs: vec![PendingJob::default(); 2],
            ..FairnessView::default()
        };
        let back = [0, 0, 0, 0, 0, 0, 5, 2, 1, 2, 0];
        let err = Fairness::apply_view_change(&back, &mut two).unwrap_err();
        assert!(err.to_string().contains("out of place"), "{err}");
    }

    /// A fairness view of a few jobs over many VCs a round later, one VC's
    /// use changed and a job arrived: the VC list travels as runs, rebuilt
    /// in place.
    #[test]
    fn a_view_sends_the_vcs_that_changed() {
        let vc = |i: u32| VcUsage {
            id: crate::VcId(i),
            quota_gpus: Some(100 + i),
            weight: 1,
            held_gpus: 10 * i,
            pending_gpus: 0,
            attained_gpu_s: 1_000_000 + u64::from(i),
            pending_jobs: 0,
        };
        let base = FairnessView {
            now_s: 5_000,
            vcs: (0..15).map(vc).collect(),
            jobs: vec![PendingJob {
                id: JobId(1),
                gpus: 1,
                ..PendingJob::default()
            }],
            ..FairnessView::default()
        };
        let mut view = base.clone();
        view.now_s = 5_007;
        view.jobs[0].waiting_s += 7;
        view.vcs[4].held_gpus += 8;
        view.jobs.push(PendingJob {
            id: JobId(2),
            gpus: 8,
            ..PendingJob::default()
        });
        let mut whole = Vec::new();
        Fairness::encode_view(&view, &mut whole);
        let mut bytes = Vec::new();
        assert!(Fairness::encode_view_change(&base, &view, None, &mut bytes));
        assert!(
            bytes.len() * 3 < whole.len(),
            "{} of {} bytes",
            bytes.len(),
            whole.len()
        );
        let mut held = base.clone();
        let memory = held.vcs.as_ptr();
        Fairness::apply_view_change(&bytes, &mut held).unwrap();
        assert_eq!(held, view);
        assert_eq!(held.vcs.as_ptr(), memory, "rebuilt in place");
    }
}
