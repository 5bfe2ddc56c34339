//! Postcard's format without serde: the [`Wire`] trait a view or decision
//! type derives (`#[derive(Wire)]`, crate `gangway-wire-derive`), its
//! implementations for the primitives the contract's types are made of,
//! and the [`Writer`] and [`Reader`] the derived code writes and reads
//! with. Byte for byte what `postcard` writes for the same type through
//! serde (the tests check it against serde's bytes on random values, and
//! against postcard's decoding of random bytes), about three times faster,
//! because each varint goes straight from and into the buffer; and no
//! serde in a policy's module.
//!
//! Decoding reads into a value kept from the last call (`read_into`),
//! reusing its lists' memory; a length is refused before anything is
//! allocated when the bytes left cannot hold its entries.

use super::codec::{U32, U64, WireError};

/// A type with postcard's encoding, written and read without serde.
/// Derived (`#[derive(Wire)]`) for the contract's views, decisions and
/// their parts, field by field in declaration order: a struct is its
/// fields, an enum its variant's index (a varint) and then its fields, as
/// serde numbers and postcard writes them.
pub trait Wire: Default {
    /// The type's name, as decoding errors call it.
    const NAME: &'static str;
    /// The fewest bytes any value takes (what bounds a length before
    /// anything is allocated).
    const MIN_BYTES: usize;
    /// The most bytes any value takes, if that does not depend on the
    /// value (no list inside).
    const MAX_BYTES: Option<usize>;

    /// The most bytes this value takes.
    fn max_bytes(&self) -> usize;

    /// Writes it.
    fn write(&self, w: &mut Writer<'_>);

    /// Reads a value over `self`, reusing its memory. After an error
    /// `self` holds a partial value and must not be used.
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), WireError>;
}

/// `a + b` of two [`Wire::MAX_BYTES`] (for derived constants).
#[doc(hidden)]
pub const fn add_max(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    }
}

/// The larger of two [`Wire::MAX_BYTES`] (for derived enums).
#[doc(hidden)]
pub const fn larger_max(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) if a >= b => Some(a),
        (Some(_), Some(b)) => Some(b),
        _ => None,
    }
}

/// The smaller of two [`Wire::MIN_BYTES`] (for derived enums).
#[doc(hidden)]
pub const fn smaller_min(a: usize, b: usize) -> usize {
    if a <= b { a } else { b }
}

/// Encodes `value` into `out` (cleared first), as postcard does.
pub(crate) fn encode_into<T: Wire>(value: &T, out: &mut Vec<u8>) {
    write_message(out, value.max_bytes(), |w| value.write(w));
}

/// Decodes `bytes` over `value` (reusing its memory); trailing bytes are
/// an error. After an error `value` must not be used.
pub(crate) fn decode_into<T: Wire>(bytes: &[u8], value: &mut T) -> Result<(), WireError> {
    let mut r = Reader::new(bytes, T::NAME);
    value.read_into(&mut r)?;
    r.finish()
}

/// Writes a message into `out`, sized up front for `max` bytes and cut to
/// the bytes written: a bounds check per byte on a slice held in
/// registers, instead of a `Vec::push`'s capacity check and length update
/// (a byte store may alias the `Vec`'s own fields, so `push` reloads them).
/// Memory the buffer had from an earlier message is overwritten, not zeroed
/// again. Should `max` be short, the message is written again at the size
/// the first pass counted.
#[inline(always)]
pub fn write_message(out: &mut Vec<u8>, max: usize, write: impl Fn(&mut Writer<'_>)) {
    // One call site of `write`, so that it is compiled once: a second pass
    // knows the size it needs and fits.
    let mut size = max;
    while let Err(needed) = write_sized(out, size, &write) {
        size = needed;
    }
}

/// One pass of [`write_message`]: the bytes it needed, leaving `out`
/// unspecified, if `max` was too small.
#[inline(always)]
fn write_sized(
    out: &mut Vec<u8>,
    max: usize,
    write: &impl Fn(&mut Writer<'_>),
) -> Result<(), usize> {
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
    if fits { Ok(()) } else { Err(at) }
}

/// Where a message is written: a buffer and a cursor (see
/// [`write_message`]). A byte past the buffer's end is counted, not
/// written.
pub struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    /// Writes one byte.
    #[inline(always)]
    pub fn byte(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.at) {
            *slot = b;
        }
        self.at += 1;
    }

    /// Writes `v` as a varint (7 bits a byte, least significant first).
    #[inline(always)]
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
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

/// What a message is read from: its bytes, a cursor, and the name of what
/// is read (for errors).
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`, which hold a `what`.
    pub fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { bytes, at: 0, what }
    }

    /// The error `reason` at the current byte. Inlined, handing plain values
    /// to the cold constructor, so that the reader never has its address
    /// taken and its cursor can live in a register (in Wasm, a reader in
    /// linear memory costs a store per byte read).
    #[inline(always)]
    pub fn error(&self, reason: &'static str) -> WireError {
        wire_error(self.what, self.at, reason)
    }

    /// Reads one byte.
    #[inline]
    pub fn byte(&mut self) -> Result<u8, WireError> {
        match self.bytes.get(self.at) {
            Some(&b) => {
                self.at += 1;
                Ok(b)
            }
            None => Err(self.error("unexpected end")),
        }
    }

    /// A varint of at most `max_bytes` bytes (5 for `u32`, 10 for `u64`)
    /// and at most `max`. One-byte values (most counts, ids of VCs and
    /// levels) take the inlined fast path; longer ones, and every error,
    /// are read out of line ([`long_varint`]: one copy per module instead
    /// of one per field read, about a fifth of a policy module's decoding
    /// code), handing the cursor as a value so the reader stays in
    /// registers.
    #[inline(always)]
    fn varint(&mut self, max_bytes: u32, max: u64) -> Result<u64, WireError> {
        match self.bytes.get(self.at) {
            Some(&b) if b < 0x80 => {
                self.at += 1;
                Ok(u64::from(b))
            }
            _ => {
                let (v, at) = long_varint(self.bytes, self.at, max_bytes, max, self.what)?;
                self.at = at;
                Ok(v)
            }
        }
    }

    /// Reads a `u64` varint.
    #[inline(always)]
    pub fn u64(&mut self) -> Result<u64, WireError> {
        self.varint(10, u64::MAX)
    }

    /// Reads a `u32` varint.
    #[inline(always)]
    pub fn u32(&mut self) -> Result<u32, WireError> {
        // (`varint` refuses a value above `u32::MAX`.)
        Ok(self.varint(5, u64::from(u32::MAX))? as u32)
    }

    /// A sequence length; each element takes at least `min_bytes` bytes, so
    /// a length the remaining bytes cannot hold is refused before allocating.
    #[inline(always)]
    pub fn len(&mut self, min_bytes: usize) -> Result<usize, WireError> {
        let n = usize::try_from(self.u64()?).unwrap_or(usize::MAX);
        self.room_for(n, min_bytes)?;
        Ok(n)
    }

    /// Refuses `n` elements of at least `min_bytes` bytes each when the
    /// remaining bytes cannot hold them.
    #[inline(always)]
    pub fn room_for(&self, n: usize, min_bytes: usize) -> Result<(), WireError> {
        if n.saturating_mul(min_bytes) > self.bytes.len() - self.at {
            return Err(self.error("length past the end"));
        }
        Ok(())
    }

    /// A sequence length as [`Reader::len`] does, and at most `max`: the
    /// number of entries the answered view allows.
    #[inline(always)]
    pub fn bounded_len(&mut self, min_bytes: usize, max: usize) -> Result<usize, WireError> {
        let n = self.len(min_bytes)?;
        if n > max {
            return Err(self.error("more entries than the view has jobs"));
        }
        Ok(n)
    }

    /// Whether every byte has been read (a trailing field is absent).
    #[inline(always)]
    pub fn is_at_end(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// Refuses bytes left over.
    #[inline(always)]
    pub fn finish(&self) -> Result<(), WireError> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(trailing(self.what, self.at, self.bytes.len() - self.at))
        }
    }
}

/// The varint of at most `max_bytes` bytes at `at` of `bytes` and the
/// position after it, refused ("unexpected end" if the bytes end first,
/// "bad varint" if it is longer, overflows, or is above `max`, the last
/// at the position after it) as an error of reading a `what`.
#[inline(never)]
fn long_varint(
    bytes: &[u8],
    start: usize,
    max_bytes: u32,
    max: u64,
    what: &'static str,
) -> Result<(u64, usize), WireError> {
    let mut v = 0u64;
    let mut at = start;
    for i in 0..max_bytes {
        let Some(&b) = bytes.get(at) else {
            return Err(wire_error(what, start, "unexpected end"));
        };
        at += 1;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            if i == 9 && b > 1 {
                break;
            }
            if v > max {
                return Err(wire_error(what, at, "bad varint"));
            }
            return Ok((v, at));
        }
    }
    Err(wire_error(what, start, "bad varint"))
}

/// Reads `n` entries (a length already read and checked) over `list`,
/// reusing its entries' memory: the list is resized first and each entry
/// overwritten in place (no per-entry length update, as `push` would do;
/// the length is usually the last call's).
#[inline(always)]
pub fn read_list<T: Wire>(
    r: &mut Reader<'_>,
    list: &mut Vec<T>,
    n: usize,
) -> Result<(), WireError> {
    list.resize_with(n, T::default);
    for e in list.iter_mut() {
        e.read_into(r)?;
    }
    Ok(())
}

/// Reads a list of at most `max` entries over `list` (a decision's list,
/// bounded by the view it answers: a longer one is refused before anything
/// is allocated).
#[inline(always)]
pub fn read_bounded_list<T: Wire>(
    r: &mut Reader<'_>,
    list: &mut Vec<T>,
    max: usize,
) -> Result<(), WireError> {
    let n = r.bounded_len(T::MIN_BYTES.max(1), max)?;
    read_list(r, list, n)
}

impl Wire for u8 {
    const NAME: &'static str = "u8";
    const MIN_BYTES: usize = 1;
    const MAX_BYTES: Option<usize> = Some(1);
    fn max_bytes(&self) -> usize {
        1
    }
    #[inline(always)]
    fn write(&self, w: &mut Writer<'_>) {
        w.byte(*self);
    }
    #[inline(always)]
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        *self = r.byte()?;
        Ok(())
    }
}

impl Wire for u32 {
    const NAME: &'static str = "u32";
    const MIN_BYTES: usize = 1;
    const MAX_BYTES: Option<usize> = Some(U32);
    fn max_bytes(&self) -> usize {
        U32
    }
    #[inline(always)]
    fn write(&self, w: &mut Writer<'_>) {
        w.varint(u64::from(*self));
    }
    #[inline(always)]
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        *self = r.u32()?;
        Ok(())
    }
}

impl Wire for u64 {
    const NAME: &'static str = "u64";
    const MIN_BYTES: usize = 1;
    const MAX_BYTES: Option<usize> = Some(U64);
    fn max_bytes(&self) -> usize {
        U64
    }
    #[inline(always)]
    fn write(&self, w: &mut Writer<'_>) {
        w.varint(*self);
    }
    #[inline(always)]
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        *self = r.u64()?;
        Ok(())
    }
}

impl Wire for bool {
    const NAME: &'static str = "bool";
    const MIN_BYTES: usize = 1;
    const MAX_BYTES: Option<usize> = Some(1);
    fn max_bytes(&self) -> usize {
        1
    }
    #[inline(always)]
    fn write(&self, w: &mut Writer<'_>) {
        w.byte(u8::from(*self));
    }
    #[inline(always)]
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        *self = match r.byte()? {
            0 => false,
            1 => true,
            _ => return Err(r.error("bad bool")),
        };
        Ok(())
    }
}

/// Nothing: no bytes (what a list without a paired one pairs with).
impl Wire for () {
    const NAME: &'static str = "()";
    const MIN_BYTES: usize = 0;
    const MAX_BYTES: Option<usize> = Some(0);
    fn max_bytes(&self) -> usize {
        0
    }
    fn write(&self, _w: &mut Writer<'_>) {}
    fn read_into(&mut self, _r: &mut Reader<'_>) -> Result<(), WireError> {
        Ok(())
    }
}

impl<T: Wire> Wire for Option<T> {
    const NAME: &'static str = "Option";
    const MIN_BYTES: usize = 1;
    const MAX_BYTES: Option<usize> = add_max(Some(1), T::MAX_BYTES);
    fn max_bytes(&self) -> usize {
        1 + self.as_ref().map_or(0, Wire::max_bytes)
    }
    #[inline(always)]
    fn write(&self, w: &mut Writer<'_>) {
        match self {
            None => w.byte(0),
            Some(v) => {
                w.byte(1);
                v.write(w);
            }
        }
    }
    #[inline(always)]
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        match r.byte()? {
            0 => *self = None,
            1 => self.get_or_insert_with(T::default).read_into(r)?,
            _ => return Err(r.error("bad Option tag")),
        }
        Ok(())
    }
}

impl<T: Wire> Wire for Vec<T> {
    const NAME: &'static str = "Vec";
    const MIN_BYTES: usize = 1;
    const MAX_BYTES: Option<usize> = None;
    fn max_bytes(&self) -> usize {
        U64 + match T::MAX_BYTES {
            Some(each) => self.len().saturating_mul(each),
            None => self.iter().map(Wire::max_bytes).sum(),
        }
    }
    #[cfg_attr(not(target_arch = "wasm32"), inline(always))]
    #[cfg_attr(target_arch = "wasm32", inline)]
    fn write(&self, w: &mut Writer<'_>) {
        w.varint(self.len() as u64);
        for e in self {
            e.write(w);
        }
    }
    #[cfg_attr(not(target_arch = "wasm32"), inline(always))]
    #[cfg_attr(target_arch = "wasm32", inline)]
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        let n = r.len(T::MIN_BYTES.max(1))?;
        read_list(r, self, n)
    }
}

impl<A: Wire, B: Wire> Wire for (A, B) {
    const NAME: &'static str = "tuple";
    const MIN_BYTES: usize = A::MIN_BYTES + B::MIN_BYTES;
    const MAX_BYTES: Option<usize> = add_max(A::MAX_BYTES, B::MAX_BYTES);
    fn max_bytes(&self) -> usize {
        self.0.max_bytes() + self.1.max_bytes()
    }
    #[inline(always)]
    fn write(&self, w: &mut Writer<'_>) {
        self.0.write(w);
        self.1.write(w);
    }
    #[inline(always)]
    fn read_into(&mut self, r: &mut Reader<'_>) -> Result<(), WireError> {
        self.0.read_into(r)?;
        self.1.read_into(r)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::ids::{JobId, Level, ServerId, VcId};
    use crate::slots::{
        Defragment, DefragmentDecision, FailureClass, Fairness, FairnessDecision, FairnessView,
        Gang, GangAction, GangDecision, Locality, LocalityDecision, Move, QueueView, Ranked,
        Reclaim, ReclaimDecision, ReclaimView, Retry, RetryAction, RetryDecision,
    };
    use crate::testing::SlotViews;
    use crate::view::{PendingJob, RunningJob, ServerState, SpreadLimit, WaitingJob};
    use crate::wire::{self, codec};
    use crate::{Manifest, QueueOrder, RunningScope, SlotContract};

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

    /// Slot `S`'s view encodes to serde's bytes, and decodes back over a
    /// view that held another one.
    fn view_is_postcard<S: SlotContract>(
        view: &S::View,
        held: &mut S::View,
    ) -> Result<(), TestCaseError> {
        let mut buf = vec![0xAA; 3];
        wire::encode_view_into::<S>(view, &mut buf);
        prop_assert_eq!(&buf, &codec::encode(view));
        wire::decode_view_into::<S>(&buf, held).unwrap();
        prop_assert_eq!(&*held, view);
        Ok(())
    }

    /// Slot `S`'s decision encodes to serde's bytes and decodes back.
    fn decision_is_postcard<S: SlotContract>(
        decision: &S::Decision,
        view: &S::View,
    ) -> Result<(), TestCaseError> {
        let mut buf = Vec::new();
        wire::encode_decision_into::<S>(decision, &mut buf);
        prop_assert_eq!(&buf, &codec::encode(decision));
        prop_assert_eq!(&wire::decode_decision::<S>(&buf, view).unwrap(), decision);
        Ok(())
    }

    /// Whether `bytes` decode alike (both refused, or both to the same
    /// value) through the derived codec and postcard.
    fn agree<T: super::Wire + PartialEq + std::fmt::Debug + serde::de::DeserializeOwned>(
        bytes: &[u8],
    ) -> Result<(), TestCaseError> {
        let mut value = T::default();
        let derived = super::decode_into(bytes, &mut value).ok().map(|()| value);
        prop_assert_eq!(derived, codec::decode::<T>(bytes).ok());
        Ok(())
    }

    fn retry_action() -> impl Strategy<Value = RetryAction> {
        prop_oneof![
            any::<u64>().prop_map(|after_s| RetryAction::Retry { after_s }),
            (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(gpus, run_s, after_s)| {
                RetryAction::Probe {
                    gpus,
                    run_s,
                    after_s,
                }
            }),
            Just(RetryAction::GiveUp),
        ]
    }

    fn manifest() -> impl Strategy<Value = Manifest> {
        let order = prop_oneof![
            Just(QueueOrder::All),
            Just(QueueOrder::Submit),
            prop::collection::vec(any::<u64>(), 0..5).prop_map(QueueOrder::AttainedBands),
            Just(QueueOrder::Smallest),
        ];
        let running = prop_oneof![
            Just(RunningScope::All),
            Just(RunningScope::Borrowed),
            any::<u64>().prop_map(|min_run_s| RunningScope::GiveBack { min_run_s }),
        ];
        (order, running, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(queue_order, running, view_changes, gpu_types, server_types)| Manifest {
                queue_order,
                running,
                view_changes,
                gpu_types,
                server_types,
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Every slot's view codec is byte for byte postcard.
        #[test]
        fn the_view_codec_is_postcard(
            fairness in Fairness::views(),
            queue in Gang::views(),
            reclaim in Reclaim::views(),
            retry in Retry::views(),
            defragment in Defragment::views(),
        ) {
            view_is_postcard::<Fairness>(&fairness, &mut fairness_of(3))?;
            view_is_postcard::<Locality>(&queue, &mut QueueView::default())?;
            // Into a view that held another one: every field is overwritten.
            view_is_postcard::<Reclaim>(&reclaim, &mut strategy_sample())?;
            view_is_postcard::<Retry>(&retry, &mut Default::default())?;
            view_is_postcard::<Defragment>(&defragment, &mut Default::default())?;
        }

        /// Decisions too.
        #[test]
        fn the_decision_codec_is_postcard(
            order in prop::collection::vec((any::<u64>(), any::<bool>()), 0..300),
            limits in prop::collection::vec((any::<u8>(), any::<u32>()), 0..300),
            actions in prop::collection::vec(0u8..3, 0..300),
            max_reservations in any::<u32>(),
            stop in prop::collection::vec(any::<u64>(), 0..20),
            retry in prop::collection::vec(retry_action(), 0..20),
            moves in prop::collection::vec((any::<u64>(), prop::collection::vec((any::<u32>(), any::<u32>()), 0..4)), 0..10),
            start in prop::option::of(any::<u64>()),
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
            decision_is_postcard::<Fairness>(&f, &fairness_of(300))?;
            decision_is_postcard::<Locality>(&l, &queue_of(300))?;
            decision_is_postcard::<Gang>(&g, &queue_of(300))?;
            let reclaim = ReclaimDecision { stop: stop.iter().map(|&j| JobId(j)).collect(), start: vec![JobId(1)] };
            let big = ReclaimView { running: vec![RunningJob::default(); 40], ..ReclaimView::default() };
            decision_is_postcard::<Reclaim>(&reclaim, &big)?;
            let r = RetryDecision { actions: retry };
            let failures = crate::RetryView { failures: vec![Default::default(); 20], ..Default::default() };
            decision_is_postcard::<Retry>(&r, &failures)?;
            let d = DefragmentDecision {
                moves: moves
                    .into_iter()
                    .map(|(j, to)| Move { job: JobId(j), to: to.into_iter().map(|(s, g)| (ServerId(s), g)).collect() })
                    .collect(),
                start: start.map(JobId),
            };
            let room = crate::DefragmentView {
                running: vec![RunningJob { gpus: 40, ..RunningJob::default() }; 10],
                ..Default::default()
            };
            decision_is_postcard::<Defragment>(&d, &room)?;
        }

        /// The manifest a policy's `init` answers.
        #[test]
        fn the_manifest_codec_is_postcard(m in manifest()) {
            let mut buf = Vec::new();
            super::encode_into(&m, &mut buf);
            prop_assert_eq!(&buf, &codec::encode(&m));
            agree::<Manifest>(&buf)?;
        }

        /// On arbitrary bytes (a hostile reply) the decoders never panic and
        /// accept exactly what postcard accepts, with the same value.
        #[test]
        fn the_decoders_agree_with_postcard_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            agree::<FairnessView>(&bytes)?;
            agree::<QueueView>(&bytes)?;
            agree::<ReclaimView>(&bytes)?;
            agree::<crate::RetryView>(&bytes)?;
            agree::<crate::DefragmentView>(&bytes)?;
            agree::<Manifest>(&bytes)?;
            agree::<(QueueOrder, RunningScope)>(&bytes)?;
            agree::<FailureClass>(&bytes)?;
            agree::<WaitingJob>(&bytes)?;
            agree::<(VcId, Option<u32>)>(&bytes)?;
            prop_assert_eq!(wire::decode_decision::<Fairness>(&bytes, &fairness_of(300)).ok(), codec::decode::<FairnessDecision>(&bytes).ok());
            prop_assert_eq!(wire::decode_decision::<Locality>(&bytes, &queue_of(300)).ok(), codec::decode::<LocalityDecision>(&bytes).ok());
            prop_assert_eq!(wire::decode_decision::<Gang>(&bytes, &queue_of(300)).ok(), codec::decode::<GangDecision>(&bytes).ok());
            agree::<ReclaimDecision>(&bytes)?;
            agree::<RetryDecision>(&bytes)?;
            agree::<DefragmentDecision>(&bytes)?;
        }

        /// A decision naming more entries than the view has jobs is refused
        /// before it is decoded, whatever its bytes.
        #[test]
        fn decisions_are_bounded_by_the_view(n in 0usize..50, extra in 1usize..50) {
            let f = FairnessDecision {
                order: (0..n + extra).map(|i| Ranked { job: JobId(i as u64), eligible: true }).collect(),
            };
            let bytes = codec::encode(&f);
            prop_assert!(wire::decode_decision::<Fairness>(&bytes, &fairness_of(n)).is_err());
            prop_assert!(wire::decode_decision::<Fairness>(&bytes, &fairness_of(n + extra)).is_ok());
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
        let mut decode = |bytes: &[u8]| wire::decode_view_into::<Locality>(bytes, &mut view);
        // A u32 varint past u32::MAX, a u64 varint of 11 bytes, trailing
        // bytes, a length longer than the input.
        assert!(decode(&[0, 0xff, 0xff, 0xff, 0xff, 0x7f]).is_err());
        let mut long = vec![0xffu8; 10];
        long.push(0x01);
        assert!(decode(&long).is_err());
        assert!(decode(&[0, 0, 0, 1, 0, 0, 0, 0, 7]).is_err());
        assert!(decode(&[0, 0, 0, 1, 0, 0xff, 0xff, 0x03]).is_err());
    }

    /// A message longer than its stated most bytes is written whole anyway.
    #[test]
    fn a_short_estimate_still_writes_the_whole_message() {
        let mut out = vec![7; 2];
        super::write_message(&mut out, 1, |w| {
            for b in 0..40u8 {
                w.byte(b);
            }
        });
        assert_eq!(out, (0..40).collect::<Vec<u8>>());
    }
}
