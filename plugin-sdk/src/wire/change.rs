//! Views as changes from the last one: what the host sends a module
//! whose glue asks for it (the manifest's `view_changes`, which the SDK's
//! export glue sets). A backlog that stands from round to round then costs
//! the jobs and VCs that changed, not every entry encoded by the host and
//! decoded in the sandbox again. Views of fewer than 16 entries travel
//! whole.
//!
//! A view type says which of its lists travel as runs (`#[wire(runs)]`,
//! see `gangway-wire-derive`); a view without such lists always travels
//! whole. A change is the view's fields in declaration order: its clock
//! (`#[wire(now)]`) and every other field whole, each list that travels as
//! runs as runs. A list paired with another (`#[wire(pairs_with = ...)]`:
//! a queue view's spread limits, one per job) is preceded by a byte saying
//! whether its entries travel with the list's runs (1: both views have one
//! per entry) or whole at their own place (0). So a change of a fairness
//! view ([`crate::FairnessView`]) is its `now_s` and `cluster`, then its
//! `vcs` and its jobs as runs; a change of a locality or gang view
//! ([`crate::QueueView`]) its `now_s`, `cluster`, that byte, the jobs' runs
//! and, unpaired, the limits; a change of a reclaim view
//! ([`crate::ReclaimView`]) its `now_s` and `cluster`, then its VCs,
//! servers, running jobs and waiting jobs, each as runs.
//!
//! A list's runs start with a varint `count << 1 | in_place`, then `count`
//! runs. A run is a varint header `count << 1 | kind`:
//! - kind 0, *keep*: a varint `from`; the base's entries `from..from +
//!   count` (and their paired entries, when they travel with the list),
//!   each advanced by the time between the two views (`dt = now_s -
//!   base.now_s`, wrapping) along its clock (`#[wire(clock)]`): a pending
//!   or waiting job's `waiting_s` by `dt`, a running job's
//!   `attained_gpu_s` by `gpus * dt`, a server or a VC not at all;
//! - kind 1, *new*: `count` entries follow in full, each followed by its
//!   paired entry when they travel with the list.
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

use super::codec::{U64, WireError};
use super::known::KnownChanges;
use super::postcard::{Reader, Wire, Writer};
use crate::ids::{JobId, ServerId, VcId};

/// Where the entries of the new list come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// The base's entries `from..from + count`.
    Keep {
        /// The first.
        from: usize,
        /// How many.
        count: usize,
    },
    /// The new list's entries `from..from + count`, sent in full.
    New {
        /// The first.
        from: usize,
        /// How many.
        count: usize,
    },
}

/// How far past the expected base entry the diff looks for an entry before
/// it asks the index (a few jobs started or left the view there).
const LOOKAHEAD: usize = 16;

thread_local! {
    /// The diff's scratch: its runs and the base's index by key (built
    /// only when an entry is not where the diff expects it).
    static DIFF: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with the diff's scratch, its runs cleared (a view change's
/// lists append their runs to it in turn).
pub fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    DIFF.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        scratch.runs.clear();
        f(scratch)
    })
}

/// The diff's scratch: its runs, and the base's positions by key.
#[derive(Default)]
pub struct Scratch {
    /// The runs of the lists diffed so far, one list after another.
    pub runs: Vec<Run>,
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

/// What identifies an entry of a list: an id, as a number.
pub trait Keyed {
    /// The id.
    fn key(&self) -> u64;
}

impl Keyed for JobId {
    #[inline(always)]
    fn key(&self) -> u64 {
        self.0
    }
}

impl Keyed for VcId {
    #[inline(always)]
    fn key(&self) -> u64 {
        u64::from(self.0)
    }
}

impl Keyed for ServerId {
    #[inline(always)]
    fn key(&self) -> u64 {
        u64::from(self.0)
    }
}

/// An id made from its number (what a decision's entry naming a view's
/// entry by position is built from).
pub trait FromKey {
    /// The id of number `key`.
    fn from_key(key: u64) -> Self;
}

impl FromKey for JobId {
    #[inline(always)]
    fn from_key(key: u64) -> Self {
        JobId(key)
    }
}

/// An entry of a list that a view change carries as runs (derived from
/// `#[wire(entry)]`, its `#[wire(key)]` and `#[wire(clock)]` fields).
pub trait Kept: Wire + Keyed {
    /// Whether `self`, `dt` seconds later, is `new`.
    fn later_is(&self, new: &Self, dt: u64) -> bool;
    /// Whether `self`, later, is `new` as far as `known` tells: the same
    /// id, its clock moved with time, not among the changes (entries the
    /// host does not track compare whole, as [`Kept::later_is`] does).
    fn later_is_known(&self, new: &Self, dt: u64, known: &KnownChanges) -> bool;
    /// `self`, `dt` seconds later.
    fn advance(&mut self, dt: u64);
}

/// One side of a diff: a list, and the entries paired with it (one per
/// entry when they travel with the list; else unused).
pub struct Side<'a, T, C> {
    /// The list.
    pub list: &'a [T],
    /// Its paired entries.
    pub paired: &'a [C],
}

impl<T, C> Clone for Side<'_, T, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, C> Copy for Side<'_, T, C> {}

impl<'a, T, C> Side<'a, T, C> {
    /// The side from entry `at` on.
    fn from(self, at: usize, paired: bool) -> Self {
        Side {
            list: &self.list[at..],
            paired: if paired { &self.paired[at..] } else { &[] },
        }
    }
}

/// Whether base entry `b` is new entry `n` `dt` seconds later (and its
/// paired entry the same, when `paired`), as far as `known` tells.
#[inline(always)]
fn same<T: Kept, C: PartialEq>(
    base: Side<'_, T, C>,
    new: Side<'_, T, C>,
    (b, n): (usize, usize),
    paired: bool,
    dt: u64,
    known: Option<&KnownChanges>,
) -> bool {
    let entry = match known {
        Some(known) => base.list[b].later_is_known(&new.list[n], dt, known),
        None => base.list[b].later_is(&new.list[n], dt),
    };
    entry && (!paired || base.paired[b] == new.paired[n])
}

/// How many entries at the start of `new` are those of `base`, `dt`
/// seconds later (with the same paired entries when `paired`), as far as
/// `known` tells when the host knows its changes.
fn unchanged<T: Kept, C: PartialEq>(
    base: Side<'_, T, C>,
    new: Side<'_, T, C>,
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
        at = base.paired[..at]
            .iter()
            .zip(&new.paired[..at])
            .take_while(|(a, b)| a == b)
            .count();
    }
    at
}

/// What a diff compares: the two sides, whether paired entries travel with
/// the list, the time between the views and what the host knows changed.
pub struct Diff<'a, T, C> {
    /// The base view's list.
    pub base: Side<'a, T, C>,
    /// The new view's list.
    pub new: Side<'a, T, C>,
    /// Whether paired entries travel with the list.
    pub paired: bool,
    /// Seconds between the views (wrapping).
    pub dt: u64,
    /// What the host knows changed, if it tracks its changes.
    pub known: Option<&'a KnownChanges>,
}

impl<T, C> Clone for Diff<'_, T, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, C> Copy for Diff<'_, T, C> {}

/// Appends the runs that build `d.new` from `d.base`, `d.dt` seconds
/// later, to `scratch.runs`; returns how many entries travel in full. With
/// `known`, an entry is kept when its id is not among the changes, unread.
pub fn diff<T: Kept, C: PartialEq>(d: Diff<'_, T, C>, scratch: &mut Scratch) -> usize {
    scratch.index.clear();
    // This list's runs: only they may be merged with.
    let first = scratch.runs.len();
    let (mut next, mut n, mut literal) = (0, 0, 0);
    // Whether the base is sorted by key, once a search needs to know.
    let mut by_key: Option<bool> = None;
    while n < d.new.list.len() {
        // The common case first: a stretch of entries unchanged but for time.
        let stretch = unchanged(
            d.base.from(next, d.paired),
            d.new.from(n, d.paired),
            d.paired,
            d.dt,
            d.known,
        );
        let runs = &mut scratch.runs;
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
        let key = d.new.list[n].key();
        if d.base.list.get(next).is_some_and(|b| b.key() == key) {
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
        let found = find(d, (next, n), key, &mut by_key, &mut scratch.index);
        let runs = &mut scratch.runs;
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

/// Where new entry `n`, of id `key`, is in the base unchanged, if anywhere:
/// at `next`, a few entries on, or (searched in a base sorted by key, else
/// through an index of the base built once) anywhere.
fn find<T: Kept, C: PartialEq>(
    d: Diff<'_, T, C>,
    (next, n): (usize, usize),
    key: u64,
    by_key: &mut Option<bool>,
    index: &mut HashMap<u64, usize, BuildHasherDefault<IdHasher>>,
) -> Option<usize> {
    let same = |b: usize| same(d.base, d.new, (b, n), d.paired, d.dt, d.known);
    let base = d.base.list;
    if next < base.len() && same(next) {
        return Some(next);
    }
    let ahead = (next + 1..base.len().min(next + LOOKAHEAD))
        .find(|&b| base[b].key() == key)
        .filter(|&b| same(b));
    ahead.or_else(|| {
        // Lists the host sorts by key (VCs, servers, running jobs) are
        // searched; any other gets an index.
        let sorted = *by_key.get_or_insert_with(|| base.is_sorted_by_key(T::key));
        let at = if sorted {
            base.binary_search_by_key(&key, T::key).ok()
        } else {
            if index.is_empty() && !base.is_empty() {
                index.reserve(base.len());
                for (b, e) in base.iter().enumerate() {
                    index.insert(e.key(), b);
                }
            }
            index.get(&key).copied()
        };
        at.filter(|&b| same(b))
    })
}

/// [`diff`] of two lists without paired entries.
pub fn diff_list<T: Kept>(
    base: &[T],
    new: &[T],
    dt: u64,
    known: Option<&KnownChanges>,
    scratch: &mut Scratch,
) -> usize {
    let bare = |list| Side::<T, ()> { list, paired: &[] };
    let d = Diff {
        base: bare(base),
        new: bare(new),
        paired: false,
        dt,
        known,
    };
    diff(d, scratch)
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

/// Writes `runs`, the entries of new runs in full (each followed by its
/// paired entry when `paired` travels with the list).
pub fn write_runs<T: Wire, C: Wire>(
    w: &mut Writer<'_>,
    runs: &[Run],
    list: &[T],
    paired: Option<&[C]>,
) {
    w.varint(((runs.len() as u64) << 1) | u64::from(in_place(runs)));
    for run in runs {
        match *run {
            Run::Keep { from, count } => {
                w.varint((count as u64) << 1);
                w.varint(from as u64);
            }
            Run::New { from, count } => {
                w.varint(((count as u64) << 1) | 1);
                for n in from..from + count {
                    list[n].write(w);
                    if let Some(paired) = paired {
                        paired[n].write(w);
                    }
                }
            }
        }
    }
}

/// Views with fewer entries than this (in all the lists that travel as
/// runs) travel whole. Sending smaller views as changes too (RFold's
/// fairness views: about 11 VCs and a job or two) moved decoding out of
/// the guest but as much diffing into the host: the replay's Wasm loop did
/// not change measurably.
pub const MIN_ENTRIES: usize = 16;

/// Whether a change with `literal` of `entries` entries in full is worth
/// sending rather than the whole view.
pub fn worth(literal: usize, entries: usize) -> bool {
    entries >= MIN_ENTRIES && literal * 2 <= entries
}

/// The most bytes `runs` take, with the new entries of `list` in full
/// (and their entries of `paired`, when they travel with them).
pub fn runs_max<T: Wire, C: Wire>(runs: &[Run], list: &[T], paired: Option<&[C]>) -> usize {
    let new: usize = runs
        .iter()
        .map(|r| match *r {
            Run::Keep { .. } => 0,
            Run::New { from, count } => {
                let entries: usize = list[from..from + count].iter().map(Wire::max_bytes).sum();
                let pairs: usize = paired.map_or(0, |p| {
                    p[from..from + count].iter().map(Wire::max_bytes).sum()
                });
                entries + pairs
            }
        })
        .sum();
    U64 + runs.len() * 2 * U64 + new
}

/// Whether a list's paired entries travel with its runs, as the byte
/// before them says (1: yes, 0: whole at their own place); refused when
/// they travel with a base list that has not one per entry.
pub fn read_paired(r: &mut Reader<'_>, list: usize, paired: usize) -> Result<bool, WireError> {
    match r.byte()? {
        1 if list == paired => Ok(true),
        1 => Err(r.error("entries travel paired with a base list they do not pair with")),
        0 => Ok(false),
        _ => Err(r.error("bad bool")),
    }
}

/// Rebuilds `list` from the runs `r` holds: in place when the runs say
/// they allow it, else into a new list (kept entries moved out of the
/// base, not copied).
pub fn apply_runs<T: Kept>(
    r: &mut Reader<'_>,
    list: &mut Vec<T>,
    dt: u64,
) -> Result<(), WireError> {
    apply_runs_paired::<T, ()>(r, list, None, dt)
}

/// [`apply_runs`], with the list's paired entries when they travel with it.
pub fn apply_runs_paired<T: Kept, C: Wire + Clone>(
    r: &mut Reader<'_>,
    list: &mut Vec<T>,
    paired: Option<&mut Vec<C>>,
    dt: u64,
) -> Result<(), WireError> {
    let header = r.u64()?;
    let n = usize::try_from(header >> 1).unwrap_or(usize::MAX);
    r.room_for(n, 2)?;
    if header & 1 == 1 {
        apply_runs_in_place(r, n, list, paired, dt)
    } else {
        apply_runs_moving(r, n, list, paired, dt)
    }
}

/// The fewest bytes an entry of a new run takes, with its paired entry.
fn entry_min<T: Wire, C: Wire>(paired: bool) -> usize {
    if paired {
        T::MIN_BYTES + C::MIN_BYTES
    } else {
        T::MIN_BYTES
    }
}

/// Reads a keep run's `from` and checks `from..from + count` is in a base
/// of `len` entries.
fn keep_run(r: &mut Reader<'_>, count: usize, len: usize) -> Result<(usize, usize), WireError> {
    let from = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
    match from.checked_add(count) {
        Some(end) if end <= len => Ok((from, end)),
        _ => Err(r.error("keep run past the base view")),
    }
}

/// The `n` runs of an in-place list (see the module docs): kept entries
/// slide left over the entries that left, new entries overwrite the base's
/// in their place or follow at the end.
fn apply_runs_in_place<T: Kept, C: Wire>(
    r: &mut Reader<'_>,
    n: usize,
    list: &mut Vec<T>,
    mut paired: Option<&mut Vec<C>>,
    dt: u64,
) -> Result<(), WireError> {
    let (mut out, mut kept_to) = (0usize, 0usize);
    for _ in 0..n {
        let header = r.u64()?;
        let count = usize::try_from(header >> 1).unwrap_or(usize::MAX);
        if header & 1 == 0 {
            let (from, end) = keep_run(r, count, list.len())?;
            if from < out || from < kept_to {
                return Err(r.error("keep run out of place in an in-place list"));
            }
            if from > out {
                // Entries before `from` left; those before `out` are final.
                for k in 0..count {
                    list.swap(out + k, from + k);
                }
                if let Some(paired) = paired.as_deref_mut() {
                    for k in 0..count {
                        paired.swap(out + k, from + k);
                    }
                }
            }
            for e in &mut list[out..out + count] {
                e.advance(dt);
            }
            out += count;
            kept_to = end;
        } else {
            r.room_for(count, entry_min::<T, C>(paired.is_some()))?;
            for _ in 0..count {
                read_at(r, list, out)?;
                if let Some(paired) = paired.as_deref_mut() {
                    read_at(r, paired, out)?;
                }
                out += 1;
            }
        }
    }
    list.truncate(out);
    if let Some(paired) = paired {
        paired.truncate(out);
    }
    Ok(())
}

/// Reads entry `at` of `list` over the one there, or (at the end) as a new
/// one.
#[inline(always)]
fn read_at<T: Wire>(r: &mut Reader<'_>, list: &mut Vec<T>, at: usize) -> Result<(), WireError> {
    if let Some(e) = list.get_mut(at) {
        e.read_into(r)
    } else {
        let mut e = T::default();
        e.read_into(r)?;
        list.push(e);
        Ok(())
    }
}

/// The `n` runs of a list whose entries may move: rebuilt into a new list.
fn apply_runs_moving<T: Kept, C: Wire + Clone>(
    r: &mut Reader<'_>,
    n: usize,
    list: &mut Vec<T>,
    paired: Option<&mut Vec<C>>,
    dt: u64,
) -> Result<(), WireError> {
    let mut next: Vec<T> = Vec::new();
    let mut next_paired = Vec::new();
    let mut kept = 0usize;
    for _ in 0..n {
        let header = r.u64()?;
        let count = usize::try_from(header >> 1).unwrap_or(usize::MAX);
        if header & 1 == 0 {
            kept = kept.saturating_add(count);
            let (from, end) = keep_run(r, count, list.len())?;
            if kept > list.len() {
                return Err(r.error("keep run past the base view"));
            }
            if next.capacity() == 0 {
                next.reserve(list.len());
            }
            let start = next.len();
            next.extend(list[from..end].iter_mut().map(std::mem::take));
            for e in &mut next[start..] {
                e.advance(dt);
            }
            if let Some(paired) = &paired {
                next_paired.extend_from_slice(&paired[from..end]);
            }
        } else {
            r.room_for(count, entry_min::<T, C>(paired.is_some()))?;
            for _ in 0..count {
                let at = next.len();
                read_at(r, &mut next, at)?;
                if paired.is_some() {
                    read_at(r, &mut next_paired, at)?;
                }
            }
        }
    }
    *list = next;
    if let Some(paired) = paired {
        *paired = next_paired;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::{Wire, WireView};
    use crate::{Fairness, wire};

    use crate::view::{PendingJob, RunningJob, ServerState, SpreadLimit, VcUsage};

    use crate::WaitReason;
    use crate::ids::{JobId, Level};
    use crate::slots::{FairnessView, QueueView, ReclaimView};
    use crate::testing::SlotViews;
    use crate::{Gang, Reclaim};

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
            base in Fairness::views(),
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
            if view.encode_change(&base, None, &mut bytes) {
                let mut held = base.clone();
                held.apply_change(&bytes).unwrap();
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
            wire::encode_view_message_known::<Fairness>(Some(&base), &view, Some(&known), &mut message);
            let mut held = base.clone();
            wire::decode_view_message::<Fairness>(&message, &mut held).unwrap();
            prop_assert_eq!(held, view);
        }

        /// The same for locality and gang views, with limits that travel
        /// with the jobs or whole.
        #[test]
        fn a_change_rebuilds_the_queue_view(
            base in Gang::views(),
            edits in edits(),
            dt in prop_oneof![Just(0u64), 1u64..100_000],
        ) {
            let (jobs, spread, known) = edited(&base.jobs, &base.spread, &edits, dt);
            let view = QueueView { now_s: base.now_s.wrapping_add(dt), jobs, spread, ..base.clone() };
            for known in [None, Some(&known)] {
                let mut bytes = Vec::new();
                if view.encode_change(&base, known, &mut bytes) {
                    let mut held = base.clone();
                    held.apply_change(&bytes).unwrap();
                    prop_assert_eq!(held, view.clone());
                }
            }
        }

        /// And for reclaim views: servers, running and waiting jobs, each
        /// list as runs, with running jobs' attained service advanced.
        #[test]
        fn a_change_rebuilds_the_reclaim_view(
            base in Reclaim::views(),
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
            if view.encode_change(&base, Some(&none), &mut known) {
                let mut held = base.clone();
                held.apply_change(&known).unwrap();
                prop_assert_eq!(&held, &view);
            }
            let mut bytes = Vec::new();
            if view.encode_change(&base, None, &mut bytes) {
                let mut held = base.clone();
                held.apply_change(&bytes).unwrap();
                prop_assert_eq!(held, view);
            } else {
                let entries =
                    view.vcs.len() + view.servers.len() + view.running.len() + view.waiting.len();
                prop_assert!(entries < MIN_ENTRIES, "{} entries", entries);
            }
            let mut held = base.clone();
            let _ = held.apply_change(&bytes);
        }

        /// On arbitrary bytes over any base the guest's side never panics,
        /// and never builds more jobs than the base and the bytes hold.
        #[test]
        fn garbage_changes_are_refused_or_bounded(
            base in Gang::views(),
            bytes in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut held = base.clone();
            if held.apply_change(&bytes).is_ok() {
                prop_assert!(held.jobs.len() <= base.jobs.len() + bytes.len() / <PendingJob as Wire>::MIN_BYTES);
            }
            let mut round = FairnessView { jobs: base.jobs.clone(), ..FairnessView::default() };
            if round.apply_change(&bytes).is_ok() {
                prop_assert!(round.jobs.len() <= base.jobs.len() + bytes.len() / <PendingJob as Wire>::MIN_BYTES);
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
        assert!(view.encode_change(&base, None, &mut bytes));
        assert!(bytes.len() < 24, "{} bytes", bytes.len());
        let mut held = base.clone();
        held.apply_change(&bytes).unwrap();
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
        assert!(view.encode_change(&base, None, &mut bytes));
        assert!(bytes.len() < 16, "{} bytes", bytes.len());
        view.jobs.drain(100..140);
        assert!(view.encode_change(&base, None, &mut bytes));
        assert!(bytes.len() < 20, "{} bytes", bytes.len());
        let mut held = base.clone();
        held.apply_change(&bytes).unwrap();
        assert_eq!(held, view);
        // A change whose keep runs copy more than the base holds is refused.
        // (now, cluster, no VC runs, then two runs that each keep job 0.)
        let bad = [0, 0, 0, 0, 0, 0, 4, 2, 0, 2, 0];
        let mut small = FairnessView {
            jobs: vec![PendingJob::default()],
            ..FairnessView::default()
        };
        let err = small.apply_change(&bad).unwrap_err();
        assert!(err.to_string().contains("past the base view"), "{err}");
        // One keep run copies it once.
        let mut small = FairnessView {
            jobs: vec![PendingJob::default()],
            ..FairnessView::default()
        };
        small.apply_change(&[0, 0, 0, 0, 0, 0, 2, 2, 0]).unwrap();
        // In place, a keep run that reaches back before the last one is refused.
        let mut two = FairnessView {
            jobs: vec![PendingJob::default(); 2],
            ..FairnessView::default()
        };
        let back = [0, 0, 0, 0, 0, 0, 5, 2, 1, 2, 0];
        let err = two.apply_change(&back).unwrap_err();
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
        wire::encode_view_into::<Fairness>(&view, &mut whole);
        let mut bytes = Vec::new();
        assert!(view.encode_change(&base, None, &mut bytes));
        assert!(
            bytes.len() * 3 < whole.len(),
            "{} of {} bytes",
            bytes.len(),
            whole.len()
        );
        let mut held = base.clone();
        let memory = held.vcs.as_ptr();
        held.apply_change(&bytes).unwrap();
        assert_eq!(held, view);
        assert_eq!(held.vcs.as_ptr(), memory, "rebuilt in place");
    }
}
