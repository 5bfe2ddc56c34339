//! Hand-written postcard codec for the bulk views ([`FairnessView`],
//! [`QueueView`], [`ReclaimView`]) and the fairness, locality and gang
//! decisions: byte for
//! byte what [`crate::codec::encode`] produces (the tests check it against
//! serde's bytes on random values and against postcard's decoding of random
//! bytes), about three times faster, because it reads and writes each varint
//! straight from and into the buffer instead of going through serde. Every
//! struct is destructured exhaustively, so a field added to one of these
//! types fails to compile here until the codec learns it.
//!
//! Decisions are decoded bounded by the view they answer: a length above the
//! view's number of jobs is refused before anything is allocated.

use super::codec::{U32, U64, WireError};
use crate::ids::ServerId;
use crate::ids::{JobId, Level, VcId};
use crate::view::{
    ClusterSummary, LevelSummary, PendingJob, RunningJob, ServerState, SpreadLimit, VcUsage,
    WaitReason, WaitingJob,
};

/// A [`WaitReason`]'s variant index, as serde numbers it (declaration order).
fn reason_index(r: WaitReason) -> u64 {
    match r {
        WaitReason::FairShare => 0,
        WaitReason::Fragmentation => 1,
        WaitReason::Reserved => 2,
        WaitReason::HeldByPolicy => 3,
        WaitReason::NoCapacity => 4,
        WaitReason::Queued => 5,
        WaitReason::RetryDelay => 6,
    }
}

/// The [`WaitReason`] of variant index `i`, if any.
fn reason_of(i: u32) -> Option<WaitReason> {
    Some(match i {
        0 => WaitReason::FairShare,
        1 => WaitReason::Fragmentation,
        2 => WaitReason::Reserved,
        3 => WaitReason::HeldByPolicy,
        4 => WaitReason::NoCapacity,
        5 => WaitReason::Queued,
        6 => WaitReason::RetryDelay,
        _ => return None,
    })
}

/// The most bytes a [`VcUsage`] takes.
pub(crate) const VC_MAX: usize = U32 + 1 + U32 + U32 + U32 + U32 + U64 + U32;
/// The most bytes a [`PendingJob`] takes.
pub(crate) const JOB_MAX: usize = 4 * U64 + 5 * U32 + 1;
/// The most bytes a [`RunningJob`] takes, but for its parts.
pub(crate) const RUNNING_MAX: usize = 4 * U64 + 4 * U32 + U64;

/// The most bytes a [`ClusterSummary`] takes.
pub(crate) fn cluster_max(c: &ClusterSummary) -> usize {
    U32 + U32 + 1 + U64 + c.levels.len() * 3 * U32
}

/// Writes a message into `out`, sized up front for its worst case and cut
/// to the bytes written: a bounds check per byte on a slice held in
/// registers, instead of a `Vec::push`'s capacity check and length update
/// (a byte store may alias the `Vec`'s own fields, so `push` reloads them).
/// Memory the buffer had from an earlier message is overwritten, not zeroed
/// again. Returns `false`, leaving `out` unspecified, if `max` was too small.
#[inline(always)]
pub(crate) fn write_sized(
    out: &mut Vec<u8>,
    max: usize,
    write: impl FnOnce(&mut Writer<'_>),
) -> bool {
    if out.len() < max {
        out.resize(max, 0);
    }
    let mut w = Writer {
        buf: out.as_mut_slice(),
        at: 0,
    };
    write(&mut w);
    let (at, fits) = (w.at, w.at <= w.buf.len());
    out.truncate(at);
    fits
}

/// The cursor of [`write_sized`].
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    #[inline(always)]
    pub(crate) fn byte(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.at) {
            *slot = b;
        }
        self.at += 1;
    }

    #[inline(always)]
    pub(crate) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    pub(crate) fn cluster_summary(&mut self, c: &ClusterSummary) {
        let ClusterSummary {
            total_gpus,
            free_gpus,
            server_level,
            levels,
        } = c;
        self.varint(u64::from(*total_gpus));
        self.varint(u64::from(*free_gpus));
        self.byte(server_level.0);
        self.varint(levels.len() as u64);
        for l in levels {
            let LevelSummary {
                domains,
                max_domain_gpus,
                max_free_gpus,
            } = l;
            self.varint(u64::from(*domains));
            self.varint(u64::from(*max_domain_gpus));
            self.varint(u64::from(*max_free_gpus));
        }
    }

    pub(crate) fn vcs(&mut self, vcs: &[VcUsage]) {
        self.varint(vcs.len() as u64);
        for v in vcs {
            self.vc(v);
        }
    }

    #[inline(always)]
    pub(crate) fn vc(&mut self, v: &VcUsage) {
        let VcUsage {
            id,
            quota_gpus,
            weight,
            held_gpus,
            pending_gpus,
            attained_gpu_s,
            pending_jobs,
        } = v;
        self.varint(u64::from(id.0));
        match quota_gpus {
            None => self.byte(0),
            Some(q) => {
                self.byte(1);
                self.varint(u64::from(*q));
            }
        }
        self.varint(u64::from(*weight));
        self.varint(u64::from(*held_gpus));
        self.varint(u64::from(*pending_gpus));
        self.varint(*attained_gpu_s);
        self.varint(u64::from(*pending_jobs));
    }

    pub(crate) fn pending_jobs(&mut self, jobs: &[PendingJob]) {
        self.varint(jobs.len() as u64);
        for j in jobs {
            self.pending_job(j);
        }
    }

    #[inline(always)]
    pub(crate) fn pending_job(&mut self, j: &PendingJob) {
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
        } = j;
        self.varint(id.0);
        self.varint(u64::from(vc.0));
        self.varint(u64::from(*user));
        self.varint(u64::from(*gpus));
        self.varint(*submitted_s);
        self.varint(*waiting_s);
        self.varint(u64::from(*attempts));
        self.varint(*attained_gpu_s);
        self.byte(min_level.0);
        self.varint(u64::from(*min_servers));
    }

    pub(crate) fn server_state(&mut self, s: &ServerState) {
        let ServerState {
            id,
            domain,
            gpus,
            free,
        } = s;
        self.varint(u64::from(id.0));
        self.varint(u64::from(*domain));
        self.varint(u64::from(*gpus));
        self.varint(u64::from(*free));
    }

    pub(crate) fn running_job(&mut self, j: &RunningJob) {
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
        } = j;
        self.varint(id.0);
        self.varint(u64::from(vc.0));
        self.varint(u64::from(*user));
        self.varint(u64::from(*gpus));
        self.varint(*submitted_s);
        self.varint(*started_s);
        self.varint(u64::from(*attempts));
        self.varint(*attained_gpu_s);
        self.varint(parts.len() as u64);
        for (server, g) in parts {
            self.varint(u64::from(server.0));
            self.varint(u64::from(*g));
        }
    }

    pub(crate) fn waiting_job(&mut self, wj: &WaitingJob) {
        let WaitingJob { job, reason, limit } = wj;
        self.pending_job(job);
        self.varint(reason_index(*reason));
        self.spread_limit(*limit);
    }

    pub(crate) fn spread_limits(&mut self, limits: &[SpreadLimit]) {
        self.varint(limits.len() as u64);
        for l in limits {
            self.spread_limit(*l);
        }
    }

    #[inline(always)]
    pub(crate) fn spread_limit(&mut self, limit: SpreadLimit) {
        let SpreadLimit { level, max_servers } = limit;
        self.byte(level.0);
        self.varint(u64::from(max_servers));
    }
}

#[cold]
#[inline(never)]
fn wire_error(what: &'static str, at: usize, reason: &str) -> WireError {
    WireError {
        what,
        reason: format!("{reason} at byte {at}"),
    }
}

#[cold]
#[inline(never)]
fn trailing(what: &'static str, at: usize, extra: usize) -> WireError {
    WireError {
        what,
        reason: format!("{extra} trailing bytes at byte {at}"),
    }
}

pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { bytes, at: 0, what }
    }

    /// The error `reason` at the current byte. Inlined, handing plain values
    /// to the cold constructor, so that the reader never has its address
    /// taken and its cursor can live in a register (in Wasm, a reader in
    /// linear memory costs a store per byte read).
    #[inline(always)]
    pub(crate) fn error(&self, reason: &'static str) -> WireError {
        wire_error(self.what, self.at, reason)
    }

    #[inline]
    pub(crate) fn byte(&mut self) -> Result<u8, WireError> {
        match self.bytes.get(self.at) {
            Some(&b) => {
                self.at += 1;
                Ok(b)
            }
            None => Err(self.error("unexpected end")),
        }
    }

    /// A varint of at most `max_bytes` bytes (5 for `u32`, 10 for `u64`).
    /// A varint of at most `max_bytes` bytes. One-byte values (most counts,
    /// ids of VCs and levels) take the inlined fast path.
    #[inline(always)]
    fn varint(&mut self, max_bytes: u32) -> Result<u64, WireError> {
        match self.bytes.get(self.at) {
            Some(&b) if b < 0x80 => {
                self.at += 1;
                Ok(u64::from(b))
            }
            _ => self.long_varint(max_bytes),
        }
    }

    #[inline(always)]
    fn long_varint(&mut self, max_bytes: u32) -> Result<u64, WireError> {
        let mut v = 0u64;
        let mut at = self.at;
        for i in 0..max_bytes {
            let Some(&b) = self.bytes.get(at) else {
                return Err(self.error("unexpected end"));
            };
            at += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b > 1 {
                    break;
                }
                self.at = at;
                return Ok(v);
            }
        }
        Err(self.error("bad varint"))
    }

    #[inline(always)]
    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        self.varint(10)
    }

    #[inline(always)]
    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        let v = self.varint(5)?;
        match u32::try_from(v) {
            Ok(v) => Ok(v),
            Err(_) => Err(self.error("bad varint")),
        }
    }

    /// A sequence length; each element takes at least `min_bytes` bytes, so
    /// a length the remaining bytes cannot hold is refused before allocating.
    #[inline(always)]
    pub(crate) fn len(&mut self, min_bytes: usize) -> Result<usize, WireError> {
        let n = usize::try_from(self.u64()?).unwrap_or(usize::MAX);
        if n.saturating_mul(min_bytes) > self.bytes.len() - self.at {
            return Err(self.error("length past the end"));
        }
        Ok(n)
    }

    /// Refuses `n` elements of at least `min_bytes` bytes each when the
    /// remaining bytes cannot hold them.
    #[inline(always)]
    pub(crate) fn room_for(&self, n: usize, min_bytes: usize) -> Result<(), WireError> {
        if n.saturating_mul(min_bytes) > self.bytes.len() - self.at {
            return Err(self.error("length past the end"));
        }
        Ok(())
    }

    /// A sequence length as [`Reader::len`] does, and at most `max`: the
    /// number of entries the answered view allows.
    #[inline(always)]
    pub(crate) fn bounded_len(&mut self, min_bytes: usize, max: usize) -> Result<usize, WireError> {
        let n = self.len(min_bytes)?;
        if n > max {
            return Err(self.error("more entries than the view has jobs"));
        }
        Ok(n)
    }

    #[inline(always)]
    pub(crate) fn spread_limits(
        &mut self,
        out: &mut Vec<SpreadLimit>,
        max: usize,
    ) -> Result<(), WireError> {
        let n = self.bounded_len(2, max)?;
        out.resize(n, SpreadLimit::default());
        for l in out.iter_mut() {
            *l = self.spread_limit()?;
        }
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn spread_limit(&mut self) -> Result<SpreadLimit, WireError> {
        Ok(SpreadLimit {
            level: Level(self.byte()?),
            max_servers: self.u32()?,
        })
    }

    #[inline(always)]
    pub(crate) fn cluster_summary(&mut self, c: &mut ClusterSummary) -> Result<(), WireError> {
        c.total_gpus = self.u32()?;
        c.free_gpus = self.u32()?;
        c.server_level = Level(self.byte()?);
        let n = self.len(3)?;
        c.levels.resize(n, LevelSummary::default());
        for l in c.levels.iter_mut() {
            *l = LevelSummary {
                domains: self.u32()?,
                max_domain_gpus: self.u32()?,
                max_free_gpus: self.u32()?,
            };
        }
        Ok(())
    }

    /// The VCs' usage, overwritten in place (the length is usually the
    /// last call's): no per-element length update as `push` would do.
    #[inline(always)]
    pub(crate) fn vcs(&mut self, vcs: &mut Vec<VcUsage>) -> Result<(), WireError> {
        let n = self.len(7)?;
        vcs.resize(n, VcUsage::default());
        for v in vcs.iter_mut() {
            self.vc_into(v)?;
        }
        Ok(())
    }

    /// One VC's usage, over `v`.
    #[inline(always)]
    pub(crate) fn vc_into(&mut self, v: &mut VcUsage) -> Result<(), WireError> {
        *v = VcUsage {
            id: VcId(self.u32()?),
            quota_gpus: match self.byte()? {
                0 => None,
                1 => Some(self.u32()?),
                _ => return Err(self.error("bad Option tag")),
            },
            weight: self.u32()?,
            held_gpus: self.u32()?,
            pending_gpus: self.u32()?,
            attained_gpu_s: self.u64()?,
            pending_jobs: self.u32()?,
        };
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn pending_jobs(&mut self, jobs: &mut Vec<PendingJob>) -> Result<(), WireError> {
        let n = self.len(10)?;
        jobs.resize(n, PendingJob::default());
        for j in jobs.iter_mut() {
            self.pending_job_into(j)?;
        }
        Ok(())
    }

    pub(crate) fn server_state_into(&mut self, s: &mut ServerState) -> Result<(), WireError> {
        *s = ServerState {
            id: ServerId(self.u32()?),
            domain: self.u32()?,
            gpus: self.u32()?,
            free: self.u32()?,
        };
        Ok(())
    }

    /// Overwrites `j`, reusing the memory of its parts.
    pub(crate) fn running_job_into(&mut self, j: &mut RunningJob) -> Result<(), WireError> {
        let mut parts = std::mem::take(&mut j.parts);
        *j = RunningJob {
            id: JobId(self.u64()?),
            vc: VcId(self.u32()?),
            user: self.u32()?,
            gpus: self.u32()?,
            submitted_s: self.u64()?,
            started_s: self.u64()?,
            attempts: self.u32()?,
            attained_gpu_s: self.u64()?,
            parts: {
                let m = self.len(2)?;
                parts.clear();
                parts.reserve(m);
                for _ in 0..m {
                    parts.push((ServerId(self.u32()?), self.u32()?));
                }
                parts
            },
        };
        Ok(())
    }

    pub(crate) fn waiting_job_into(&mut self, w: &mut WaitingJob) -> Result<(), WireError> {
        let WaitingJob { job, reason, limit } = w;
        self.pending_job_into(job)?;
        *reason = match reason_of(self.u32()?) {
            Some(reason) => reason,
            None => return Err(self.error("bad enum variant")),
        };
        *limit = self.spread_limit()?;
        Ok(())
    }

    /// Overwrites `j` in place (no pending job is returned by value: in
    /// Wasm that costs a copy through linear memory per job).
    #[inline(always)]
    pub(crate) fn pending_job_into(&mut self, j: &mut PendingJob) -> Result<(), WireError> {
        *j = PendingJob {
            id: JobId(self.u64()?),
            vc: VcId(self.u32()?),
            user: self.u32()?,
            gpus: self.u32()?,
            submitted_s: self.u64()?,
            waiting_s: self.u64()?,
            attempts: self.u32()?,
            attained_gpu_s: self.u64()?,
            min_level: Level(self.byte()?),
            min_servers: self.u32()?,
        };
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn finish(&self) -> Result<(), WireError> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(trailing(self.what, self.at, self.bytes.len() - self.at))
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{Fairness, Gang, Locality, PendingJob, Reclaim, SlotContract};

    /// A fairness view of `n` jobs: what bounds a decision's length.
    fn fairness_of(n: usize) -> FairnessView {
        FairnessView {
            jobs: vec![PendingJob::default(); n],
            ..FairnessView::default()
        }
    }

    /// A queue view of `n` jobs.
    fn queue_of(n: usize) -> QueueView {
        QueueView {
            jobs: vec![PendingJob::default(); n],
            ..QueueView::default()
        }
    }
    use crate::slots::{
        FairnessDecision, FairnessView, GangAction, GangDecision, LocalityDecision, QueueView,
        Ranked, ReclaimView,
    };
    use crate::testing::strategy;
    use crate::view::SpreadLimit;
    use crate::wire::codec;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// The hand-written view codec is byte for byte postcard.
        #[test]
        fn the_view_codec_is_postcard(
            round in strategy::fairness_view(),
            queue in strategy::queue_view(true),
            reclaim in strategy::reclaim_view(),
        ) {
            let mut buf = vec![0xAA; 3];
            Fairness::encode_view(&round, &mut buf);
            prop_assert_eq!(&buf, &codec::encode(&round));
            let mut back = FairnessView::default();
            Fairness::decode_view_into(&buf, &mut back).unwrap();
            prop_assert_eq!(back, round);
            Locality::encode_view(&queue, &mut buf);
            prop_assert_eq!(&buf, &codec::encode(&queue));
            let mut back = QueueView::default();
            Locality::decode_view_into(&buf, &mut back).unwrap();
            prop_assert_eq!(back, queue);
            Reclaim::encode_view(&reclaim, &mut buf);
            prop_assert_eq!(&buf, &codec::encode(&reclaim));
            // Into a view that held another one: every field is overwritten.
            let mut back = strategy_sample();
            Reclaim::decode_view_into(&buf, &mut back).unwrap();
            prop_assert_eq!(back, reclaim);
        }

        /// Decisions too.
        #[test]
        fn the_decision_codec_is_postcard(
            order in prop::collection::vec((any::<u64>(), any::<bool>()), 0..300),
            limits in prop::collection::vec((any::<u8>(), any::<u32>()), 0..300),
            actions in prop::collection::vec(0u8..3, 0..300),
            max_reservations in any::<u32>(),
        ) {
            let f = FairnessDecision {
                order: order.iter().map(|(j, e)| Ranked { job: JobId(*j), eligible: *e }).collect(),
            };
            let l = LocalityDecision {
                limits: limits.iter().map(|(l, s)| SpreadLimit::new(Level(*l), *s)).collect(),
            };
            let g = GangDecision {
                on_blocked: actions
                    .iter()
                    .map(|a| [GangAction::Backfill, GangAction::Block, GangAction::Reserve][*a as usize])
                    .collect(),
                max_reservations,
            };
            let mut buf = Vec::new();
            Fairness::encode_decision(&f, &mut buf);
            prop_assert_eq!(&buf, &codec::encode(&f));
            prop_assert_eq!(Fairness::decode_decision(&buf, &fairness_of(300)).unwrap(), f);
            Locality::encode_decision(&l, &mut buf);
            prop_assert_eq!(&buf, &codec::encode(&l));
            prop_assert_eq!(Locality::decode_decision(&buf, &queue_of(300)).unwrap(), l);
            Gang::encode_decision(&g, &mut buf);
            prop_assert_eq!(&buf, &codec::encode(&g));
            prop_assert_eq!(Gang::decode_decision(&buf, &queue_of(300)).unwrap(), g);
        }

        /// On arbitrary bytes (a hostile reply) the decoders never panic and
        /// accept exactly what postcard accepts, with the same value.
        #[test]
        fn the_decoders_agree_with_postcard_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut round = FairnessView::default();
            prop_assert_eq!(
                Fairness::decode_view_into(&bytes, &mut round).ok().map(|()| round),
                codec::decode::<FairnessView>(&bytes).ok()
            );
            let mut queue = QueueView::default();
            prop_assert_eq!(
                Locality::decode_view_into(&bytes, &mut queue).ok().map(|()| queue),
                codec::decode::<QueueView>(&bytes).ok()
            );
            let mut reclaim = ReclaimView::default();
            prop_assert_eq!(
                Reclaim::decode_view_into(&bytes, &mut reclaim).ok().map(|()| reclaim),
                codec::decode::<ReclaimView>(&bytes).ok()
            );
            prop_assert_eq!(Fairness::decode_decision(&bytes, &fairness_of(300)).ok(), codec::decode::<FairnessDecision>(&bytes).ok());
            prop_assert_eq!(Locality::decode_decision(&bytes, &queue_of(300)).ok(), codec::decode::<LocalityDecision>(&bytes).ok());
            prop_assert_eq!(Gang::decode_decision(&bytes, &queue_of(300)).ok(), codec::decode::<GangDecision>(&bytes).ok());
        }

        /// A decision naming more entries than the view has jobs is refused
        /// before it is decoded, whatever its bytes.
        #[test]
        fn decisions_are_bounded_by_the_view(n in 0usize..50, extra in 1usize..50) {
            let f = FairnessDecision {
                order: (0..n + extra).map(|i| Ranked { job: JobId(i as u64), eligible: true }).collect(),
            };
            let bytes = codec::encode(&f);
            prop_assert!(Fairness::decode_decision(&bytes, &fairness_of(n)).is_err());
            prop_assert!(Fairness::decode_decision(&bytes, &fairness_of(n + extra)).is_ok());
        }
    }

    /// A reclaim view with something in every vector, to decode over.
    fn strategy_sample() -> ReclaimView {
        ReclaimView {
            now_s: 9,
            servers: vec![ServerState::default(); 3],
            running: vec![
                RunningJob {
                    parts: vec![(ServerId(1), 2), (ServerId(2), 2)],
                    ..RunningJob::default()
                };
                2
            ],
            waiting: vec![WaitingJob::default(); 4],
            ..ReclaimView::default()
        }
    }

    #[test]
    fn the_decoder_refuses_what_postcard_refuses() {
        let mut view = QueueView::default();
        // A u32 varint past u32::MAX, a u64 varint of 11 bytes, trailing
        // bytes, a length longer than the input.
        assert!(Locality::decode_view_into(&[0, 0xff, 0xff, 0xff, 0xff, 0x7f], &mut view).is_err());
        let mut long = vec![0xffu8; 10];
        long.push(0x01);
        assert!(Locality::decode_view_into(&long, &mut view).is_err());
        assert!(Locality::decode_view_into(&[0, 0, 0, 1, 0, 0, 0, 0, 7], &mut view).is_err());
        assert!(Locality::decode_view_into(&[0, 0, 0, 1, 0, 0xff, 0xff, 0x03], &mut view).is_err());
    }
}
