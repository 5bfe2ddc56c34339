//! The wire bytes, frozen: every slot's views, view changes (with and
//! without the host's [`KnownChanges`]), decisions and reply messages
//! (compact where the slot has runs), and the manifest, encoded from
//! seeded samples of the conformance kit's strategies and from edge cases
//! (empty views, `u64::MAX` values, lists long enough for changes and
//! runs), compared with the files in `plugin-sdk/tests/vectors/`. Damaged
//! messages (one byte changed) are decoded too, and whether each is
//! accepted, and as what, is frozen with them: the guest and the host
//! accept exactly what they accepted when the vectors were written.
//!
//! The encoding of every value is also decoded back and compared. Rewrite
//! the files (after a deliberate change of the format, e.g. a new field)
//! with `GANGWAY_BLESS=1 cargo test -p gangway-plugin-sdk --lib
//! wire::vectors`.

use std::fmt::Write as _;
use std::path::PathBuf;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::{KnownChanges, REPLY_COMPACT, VIEW_CHANGE};
use crate::ids::{JobId, Level, ServerId, VcId};
use crate::slots::{
    Defragment, DefragmentDecision, DefragmentView, FailedAttempt, FailureClass, Fairness,
    FairnessDecision, FairnessView, Gang, GangAction, GangDecision, Locality, LocalityDecision,
    Move, QueueView, Ranked, Reclaim, ReclaimDecision, ReclaimView, Retry, RetryAction,
    RetryDecision, RetryView,
};
use crate::testing::SlotViews;
use crate::testing::rng::Rng;
use crate::view::{
    ClusterSummary, LevelSummary, PendingJob, RunningJob, ServerState, SpreadLimit, VcUsage,
    WaitReason, WaitingJob,
};
use crate::{Manifest, Policy, QueueOrder, RunningScope, SlotContract, wire};

/// Seeded samples per slot.
const SAMPLES: u64 = 12;

/// The most bytes of a case written out in full.
const FULL: usize = 1_024;

/// Seeded positions for the edits and damage.
trait Below {
    /// A position in `0..n` (0 when `n` is 0).
    fn at(&mut self, n: usize) -> usize;
}

impl Below for Rng {
    fn at(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

/// The frozen lines of one file: `name hex`, in the order written.
#[derive(Default)]
struct Vectors {
    lines: Vec<String>,
}

impl Vectors {
    /// A case's bytes: in full up to [`FULL`] bytes, else their length,
    /// a 64-bit FNV-1a hash and the first [`FULL`] bytes (the small cases
    /// show a difference byte by byte; the large ones catch it).
    fn add(&mut self, name: &str, bytes: &[u8]) {
        let mut line = String::with_capacity(name.len() + 1 + 2 * bytes.len().min(FULL) + 40);
        line.push_str(name);
        line.push(' ');
        if bytes.len() > FULL {
            let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            let _ = write!(line, "len={},fnv={hash:016x},head=", bytes.len());
        }
        for b in &bytes[..bytes.len().min(FULL)] {
            let _ = write!(line, "{b:02x}");
        }
        self.lines.push(line);
    }

    fn note(&mut self, name: &str, text: &str) {
        self.lines.push(format!("{name} {text}"));
    }

    /// Compares with `tests/vectors/<file>.txt`, or rewrites it when
    /// `GANGWAY_BLESS` is set.
    fn check(self, file: &str) {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/vectors")
            .join(format!("{file}.txt"));
        let mut want = self.lines.join("\n");
        want.push('\n');
        if std::env::var_os("GANGWAY_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("the vectors folder");
            std::fs::write(&path, &want).expect("the vectors file");
            return;
        }
        let have = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (write it with GANGWAY_BLESS=1)", path.display()));
        for (i, (h, w)) in have.lines().zip(want.lines()).enumerate() {
            if h != w {
                let name = w.split(' ').next().unwrap_or("");
                panic!(
                    "{}:{}: case {name} changed:\n  frozen:  {}\n  now:     {}",
                    path.display(),
                    i + 1,
                    shorten(h),
                    shorten(w)
                );
            }
        }
        assert_eq!(
            have.lines().count(),
            want.lines().count(),
            "{}: another number of cases",
            path.display()
        );
    }
}

/// The start of a long line, and its length.
fn shorten(line: &str) -> String {
    if line.len() <= 200 {
        line.to_string()
    } else {
        format!("{}... ({} chars)", &line[..200], line.len())
    }
}

/// `n` views of slot `S` from its conformance strategy, the same every run.
fn samples<S: SlotViews>(n: u64) -> Vec<S::View> {
    (0..n)
        .map(|i| {
            let mut seed = [0u8; 32];
            seed[..8].copy_from_slice(&(0x7769_7265 + i).to_le_bytes());
            let mut runner = TestRunner::new_with_rng(
                Config::default(),
                TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
            );
            S::views().new_tree(&mut runner).expect("a view").current()
        })
        .collect()
}

/// What each slot adds to the common vectors: its edge-case views, a later
/// view with what changed, and decisions to encode.
trait Vectored: SlotViews {
    /// Views no strategy is likely to make: empty, extreme values, long.
    fn edge_views() -> Vec<(&'static str, Self::View)>;
    /// `view` a while later, and the ids a host would know changed; `None`
    /// for a slot whose views travel whole.
    fn later(view: &Self::View, rng: &mut Rng) -> Option<(Self::View, KnownChanges)>;
    /// Decisions answering `view` (well-formed or not: the codec does not
    /// judge).
    fn decisions(view: &Self::View, rng: &mut Rng) -> Vec<Self::Decision>;
}

/// Writes every vector of slot `S` and checks each encoding decodes back.
fn slot_vectors<S: Vectored>() -> Vectors
where
    S::Fallback: Default,
{
    let mut v = Vectors::default();
    let mut rng = Rng(0x5eed ^ S::SLOT as u64);
    let mut views: Vec<(String, S::View)> = samples::<S>(SAMPLES)
        .into_iter()
        .enumerate()
        .map(|(i, view)| (format!("sample{i}"), view))
        .collect();
    views.extend(
        S::edge_views()
            .into_iter()
            .map(|(name, view)| (name.to_string(), view)),
    );
    let mut held = S::View::default();
    for (name, view) in &views {
        let bytes = wire::encode_view::<S>(view);
        v.add(&format!("view/{name}"), &bytes);
        assert_eq!(&wire::decode_view::<S>(&bytes).expect("decodes"), view);
        // Into a view that held the previous one: every field overwritten.
        wire::decode_view_message::<S>(&[&bytes[..], &[wire::VIEW_FULL]].concat(), &mut held)
            .expect("decodes");
        assert_eq!(&held, view);
        damaged_views::<S>(&mut v, &format!("view/{name}"), &bytes, view, &mut rng);
    }
    for (name, view) in &views {
        changes::<S>(&mut v, name, view, &mut rng);
    }
    for (name, view) in &views {
        // The built-in policy's answer to the samples (its arithmetic is not
        // for extreme views), then the slot's own decisions.
        let mut decisions = Vec::new();
        if name.starts_with("sample") {
            decisions.push(Policy::<S>::decide(&S::Fallback::default(), view));
        }
        decisions.extend(S::decisions(view, &mut rng));
        for (k, decision) in decisions.iter().enumerate() {
            let case = format!("decision/{name}/{k}");
            let plain = wire::encode_decision::<S>(decision);
            v.add(&case, &plain);
            let mut reply = Vec::new();
            wire::encode_reply_message::<S>(decision, view, &mut reply);
            v.add(&format!("reply/{name}/{k}"), &reply);
            // A decision longer than any answer to its view is refused.
            match (
                wire::decode_decision::<S>(&plain, view),
                wire::decode_reply_message::<S>(&reply, view),
            ) {
                (Ok(d), Ok(r)) => assert!(&d == decision && &r == decision, "{case}"),
                (Err(_), Err(_)) => v.note(&format!("{case}/decoded"), "err"),
                (d, r) => panic!("{case}: plain {d:?}, reply {r:?}"),
            }
            damaged_replies::<S>(&mut v, &case, &plain, &reply, view, &mut rng);
        }
    }
    v
}

/// The view messages from `view` to a later one (whole or a change), with
/// and without what changed; each applied to `view` must give the later.
fn changes<S: Vectored>(v: &mut Vectors, name: &str, view: &S::View, rng: &mut Rng) {
    for step in 0..2 {
        let Some((next, mut known)) = S::later(view, rng) else {
            // Such a slot's views travel whole, base or not.
            let mut message = Vec::new();
            wire::encode_view_message::<S>(Some(view), view, &mut message);
            v.add(&format!("message/{name}"), &message);
            return;
        };
        known.seal();
        for (how, known) in [("compared", None), ("known", Some(&known))] {
            let mut message = Vec::new();
            wire::encode_view_message_known::<S>(Some(view), &next, known, &mut message);
            let case = format!("change/{name}/{step}/{how}");
            v.add(&case, &message);
            let mut held = view.clone();
            wire::decode_view_message::<S>(&message, &mut held).expect("applies");
            assert_eq!(held, next, "{case}");
            if message.last() == Some(&VIEW_CHANGE) {
                damaged_changes::<S>(v, &case, &message, view, rng);
            }
        }
    }
}

/// `bytes` with one byte changed (`count` times, seeded), each decoded as
/// a whole view over `view`: `ok` and the view's encoding, or `err`.
fn damaged_views<S: Vectored>(
    v: &mut Vectors,
    case: &str,
    bytes: &[u8],
    view: &S::View,
    rng: &mut Rng,
) {
    for (k, bad) in damaged(bytes, 3, rng).into_iter().enumerate() {
        let mut held = view.clone();
        let mut message = bad.clone();
        message.push(wire::VIEW_FULL);
        let outcome = wire::decode_view_message::<S>(&message, &mut held)
            .map(|()| wire::encode_view::<S>(&held));
        record(v, &format!("{case}/damaged{k}"), outcome.ok());
    }
}

/// A view change with one byte changed, applied to its base.
fn damaged_changes<S: Vectored>(
    v: &mut Vectors,
    case: &str,
    message: &[u8],
    base: &S::View,
    rng: &mut Rng,
) {
    let body = &message[..message.len() - 1];
    for (k, mut bad) in damaged(body, 4, rng).into_iter().enumerate() {
        bad.push(VIEW_CHANGE);
        let mut held = base.clone();
        let outcome =
            wire::decode_view_message::<S>(&bad, &mut held).map(|()| wire::encode_view::<S>(&held));
        record(v, &format!("{case}/damaged{k}"), outcome.ok());
    }
}

/// A plain decision and a reply message with one byte changed, decoded as
/// the answer to `view`.
fn damaged_replies<S: Vectored>(
    v: &mut Vectors,
    case: &str,
    plain: &[u8],
    reply: &[u8],
    view: &S::View,
    rng: &mut Rng,
) {
    for (k, bad) in damaged(plain, 2, rng).into_iter().enumerate() {
        let outcome =
            wire::decode_decision::<S>(&bad, view).map(|d| wire::encode_decision::<S>(&d));
        record(v, &format!("{case}/damaged{k}"), outcome.ok());
    }
    if reply.last() == Some(&REPLY_COMPACT) {
        let body = &reply[..reply.len() - 1];
        for (k, mut bad) in damaged(body, 3, rng).into_iter().enumerate() {
            bad.push(REPLY_COMPACT);
            let outcome =
                wire::decode_reply_message::<S>(&bad, view).map(|d| wire::encode_decision::<S>(&d));
            record(v, &format!("{case}/compact-damaged{k}"), outcome.ok());
        }
    }
}

/// `count` copies of `bytes`, each with one byte changed (or, for empty
/// bytes, one byte added).
fn damaged(bytes: &[u8], count: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| {
            let mut bad = bytes.to_vec();
            // Mostly the first bytes (lengths, headers), where damage is
            // most likely to still decode as something else.
            let at = if rng.at(2) == 0 {
                rng.at(bad.len().min(12))
            } else {
                rng.at(bad.len())
            };
            let value = [0x00, 0x01, 0x02, 0x7f, 0x80, 0xff][rng.at(6)] ^ (rng.at(4) as u8);
            match bad.get_mut(at) {
                Some(b) if *b != value => *b = value,
                Some(b) => *b = value.wrapping_add(1),
                None => bad.push(value),
            }
            bad
        })
        .collect()
}

fn record(v: &mut Vectors, case: &str, outcome: Option<Vec<u8>>) {
    match outcome {
        Some(bytes) => v.add(&format!("{case} ok"), &bytes),
        None => v.note(case, "err"),
    }
}

// --- The slots' own cases ---

/// A job of every field at its largest.
fn max_job(i: u64) -> PendingJob {
    PendingJob {
        id: JobId(u64::MAX - i),
        vc: VcId(u32::MAX),
        user: u32::MAX,
        gpus: u32::MAX,
        submitted_s: u64::MAX,
        waiting_s: u64::MAX - i,
        attempts: u32::MAX,
        attained_gpu_s: u64::MAX,
        min_level: Level(u8::MAX),
        min_servers: u32::MAX,
    }
}

fn max_vc(i: u32) -> VcUsage {
    VcUsage {
        id: VcId(u32::MAX - i),
        quota_gpus: Some(u32::MAX),
        weight: u32::MAX,
        held_gpus: u32::MAX,
        pending_gpus: u32::MAX,
        attained_gpu_s: u64::MAX,
        pending_jobs: u32::MAX,
    }
}

fn max_cluster() -> ClusterSummary {
    ClusterSummary {
        total_gpus: u32::MAX,
        free_gpus: u32::MAX,
        server_level: Level(u8::MAX),
        levels: vec![
            LevelSummary {
                domains: u32::MAX,
                max_domain_gpus: u32::MAX,
                max_free_gpus: u32::MAX,
            };
            3
        ],
    }
}

/// A standing backlog of `n` jobs over 4 VCs on a 2-level cluster.
fn backlog(n: u64) -> (ClusterSummary, Vec<VcUsage>, Vec<PendingJob>) {
    let cluster = ClusterSummary {
        total_gpus: 2_400,
        free_gpus: 17,
        server_level: Level(2),
        levels: vec![
            LevelSummary {
                domains: 1,
                max_domain_gpus: 2_400,
                max_free_gpus: 17,
            },
            LevelSummary {
                domains: 20,
                max_domain_gpus: 120,
                max_free_gpus: 9,
            },
            LevelSummary {
                domains: 300,
                max_domain_gpus: 8,
                max_free_gpus: 3,
            },
        ],
    };
    let vcs = (0..4)
        .map(|i| VcUsage {
            id: VcId(i),
            quota_gpus: if i % 2 == 0 { Some(600) } else { None },
            weight: 1 + i,
            held_gpus: 500 + i,
            pending_gpus: 0,
            attained_gpu_s: 1_000_000 * u64::from(i),
            pending_jobs: 0,
        })
        .collect();
    let jobs = (0..n)
        .map(|i| PendingJob {
            id: JobId(10_000 + i),
            vc: VcId((i % 4) as u32),
            user: (i % 7) as u32,
            gpus: [1, 1, 2, 4, 8, 16][(i % 6) as usize],
            submitted_s: 1_000 + 3 * i,
            waiting_s: 90_000 - 3 * i,
            attempts: u32::from(i % 9 == 0),
            attained_gpu_s: if i % 9 == 0 { 3_600 } else { 0 },
            min_level: Level(if i % 6 == 5 { 1 } else { 2 }),
            min_servers: if i % 6 == 5 { 2 } else { 1 },
        })
        .collect();
    (cluster, vcs, jobs)
}

/// Jobs a while later: all waited `dt` more, some left, one changed, one
/// arrived, one moved; the ids changed or new go into `known`.
fn later_jobs(
    jobs: &[PendingJob],
    spread: Option<&[SpreadLimit]>,
    dt: u64,
    rng: &mut Rng,
    known: &mut KnownChanges,
) -> (Vec<PendingJob>, Vec<SpreadLimit>) {
    let mut pairs: Vec<(PendingJob, SpreadLimit)> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let mut j = *j;
            j.waiting_s = j.waiting_s.wrapping_add(dt);
            let limit = spread.and_then(|s| s.get(i).copied()).unwrap_or_default();
            (j, limit)
        })
        .collect();
    for _ in 0..rng.at(4) {
        if !pairs.is_empty() {
            pairs.remove(rng.at(pairs.len()));
        }
    }
    if !pairs.is_empty() && rng.at(3) > 0 {
        let at = rng.at(pairs.len());
        pairs[at].0.attempts = pairs[at].0.attempts.wrapping_add(1);
        known.add_job(pairs[at].0.id);
    }
    if !pairs.is_empty() && rng.at(3) == 0 {
        let at = rng.at(pairs.len());
        pairs[at].1.max_servers = pairs[at].1.max_servers.wrapping_add(1);
    }
    if rng.at(2) == 0 {
        let job = PendingJob {
            id: JobId(1_000_000 + rng.next_u64() % 1_000),
            gpus: 1 + (rng.next_u64() % 8) as u32,
            ..PendingJob::default()
        };
        known.add_job(job.id);
        let at = rng.at(pairs.len() + 1);
        pairs.insert(at, (job, SpreadLimit::level(Level(1))));
    }
    if pairs.len() > 2 && rng.at(4) == 0 {
        let p = pairs.remove(rng.at(pairs.len()));
        let at = rng.at(pairs.len());
        pairs.insert(at, p);
    }
    pairs.into_iter().unzip()
}

/// A small step of time (or none, or a wrapping one).
fn dt(rng: &mut Rng) -> u64 {
    [0, 1, 30, 3_600, u64::MAX][rng.at(5)]
}

/// VCs a while later: one's use changed (named in `known`).
fn later_vcs(vcs: &[VcUsage], rng: &mut Rng, known: &mut KnownChanges) -> Vec<VcUsage> {
    let mut vcs = vcs.to_vec();
    if !vcs.is_empty() && rng.at(2) == 0 {
        let at = rng.at(vcs.len());
        vcs[at].held_gpus = vcs[at].held_gpus.wrapping_add(8);
        known.add_vc(vcs[at].id);
    }
    vcs
}

impl Vectored for Fairness {
    fn edge_views() -> Vec<(&'static str, FairnessView)> {
        let (cluster, vcs, jobs) = backlog(1_000);
        vec![
            ("empty", FairnessView::default()),
            (
                "max",
                FairnessView {
                    now_s: u64::MAX,
                    cluster: max_cluster(),
                    vcs: (0..3).map(max_vc).collect(),
                    jobs: (0..20).map(max_job).collect(),
                },
            ),
            (
                "backlog",
                FairnessView {
                    now_s: 100_000,
                    cluster,
                    vcs,
                    jobs,
                },
            ),
        ]
    }

    fn later(view: &FairnessView, rng: &mut Rng) -> Option<(FairnessView, KnownChanges)> {
        let mut known = KnownChanges::default();
        let dt = dt(rng);
        let (jobs, _) = later_jobs(&view.jobs, None, dt, rng, &mut known);
        let vcs = later_vcs(&view.vcs, rng, &mut known);
        let next = FairnessView {
            now_s: view.now_s.wrapping_add(dt),
            cluster: view.cluster.clone(),
            vcs,
            jobs,
        };
        Some((next, known))
    }

    fn decisions(view: &FairnessView, rng: &mut Rng) -> Vec<FairnessDecision> {
        let in_order: Vec<Ranked> = view
            .jobs
            .iter()
            .map(|j| Ranked {
                job: j.id,
                eligible: true,
            })
            .collect();
        // The view's order with a few ineligible and two swapped (runs), and
        // reversed (no runs).
        let mut runs = in_order.clone();
        for _ in 0..3 {
            if let Some(r) = runs.get_mut(rng.at(in_order.len())) {
                r.eligible = false;
            }
        }
        if runs.len() > 4 {
            let at = rng.at(runs.len() - 1);
            runs.swap(at, at + 1);
        }
        let mut reversed = in_order.clone();
        reversed.reverse();
        vec![
            FairnessDecision { order: runs },
            FairnessDecision { order: reversed },
        ]
    }
}

/// Queue views of a standing backlog, with and without limits.
fn queue_edges(with_limits: bool) -> Vec<(&'static str, QueueView)> {
    let (cluster, _, jobs) = backlog(600);
    let spread = if with_limits {
        jobs.iter()
            .map(|j| SpreadLimit::new(j.min_level, j.min_servers))
            .collect()
    } else {
        Vec::new()
    };
    vec![
        ("empty", QueueView::default()),
        (
            "max",
            QueueView {
                now_s: u64::MAX,
                cluster: max_cluster(),
                jobs: (0..20).map(max_job).collect(),
                spread: if with_limits {
                    vec![SpreadLimit::new(Level(u8::MAX), u32::MAX); 20]
                } else {
                    Vec::new()
                },
            },
        ),
        (
            "backlog",
            QueueView {
                now_s: 100_000,
                cluster,
                jobs,
                spread,
            },
        ),
        (
            // Limits that do not pair with the jobs: they travel whole.
            "unpaired",
            QueueView {
                now_s: 7,
                cluster: ClusterSummary::default(),
                jobs: (0..40)
                    .map(|i| PendingJob {
                        id: JobId(i),
                        ..PendingJob::default()
                    })
                    .collect(),
                spread: vec![SpreadLimit::level(Level(1)); 3],
            },
        ),
    ]
}

/// A queue view a while later; its limits stay paired (or not) as they were.
fn later_queue(view: &QueueView, rng: &mut Rng) -> (QueueView, KnownChanges) {
    let mut known = KnownChanges::default();
    let dt = dt(rng);
    let paired = view.spread.len() == view.jobs.len();
    let (jobs, spread) = later_jobs(
        &view.jobs,
        paired.then_some(&view.spread[..]),
        dt,
        rng,
        &mut known,
    );
    let next = QueueView {
        now_s: view.now_s.wrapping_add(dt),
        cluster: view.cluster.clone(),
        jobs,
        spread: if paired { spread } else { view.spread.clone() },
    };
    (next, known)
}

impl Vectored for Locality {
    fn edge_views() -> Vec<(&'static str, QueueView)> {
        queue_edges(false)
    }

    fn later(view: &QueueView, rng: &mut Rng) -> Option<(QueueView, KnownChanges)> {
        Some(later_queue(view, rng))
    }

    fn decisions(view: &QueueView, rng: &mut Rng) -> Vec<LocalityDecision> {
        let n = view.jobs.len();
        let widths = 1 + rng.at(3);
        vec![
            LocalityDecision {
                limits: vec![SpreadLimit::level(Level(1)); n],
            },
            LocalityDecision {
                limits: (0..n)
                    .map(|i| SpreadLimit::new(Level((i * widths / n.max(1)) as u8), 2))
                    .collect(),
            },
            LocalityDecision {
                limits: (0..n)
                    .map(|i| SpreadLimit::new(Level((i % 3) as u8), u32::MAX))
                    .collect(),
            },
        ]
    }
}

impl Vectored for Gang {
    fn edge_views() -> Vec<(&'static str, QueueView)> {
        queue_edges(true)
    }

    fn later(view: &QueueView, rng: &mut Rng) -> Option<(QueueView, KnownChanges)> {
        Some(later_queue(view, rng))
    }

    fn decisions(view: &QueueView, rng: &mut Rng) -> Vec<GangDecision> {
        let n = view.jobs.len();
        let actions = [GangAction::Backfill, GangAction::Block, GangAction::Reserve];
        let first = actions[rng.at(3)];
        vec![
            GangDecision {
                on_blocked: vec![first; n],
                max_reservations: u32::MAX,
            },
            GangDecision {
                on_blocked: (0..n).map(|i| actions[(i * 3) / n.max(1)]).collect(),
                max_reservations: 2,
            },
            GangDecision {
                on_blocked: (0..n).map(|i| actions[i % 3]).collect(),
                max_reservations: 0,
            },
        ]
    }
}

/// Running jobs of every field at its largest.
fn max_running(i: u64) -> RunningJob {
    RunningJob {
        id: JobId(u64::MAX - i),
        vc: VcId(u32::MAX),
        user: u32::MAX,
        gpus: u32::MAX,
        submitted_s: u64::MAX,
        started_s: u64::MAX,
        attempts: u32::MAX,
        attained_gpu_s: u64::MAX - i,
        parts: vec![(ServerId(u32::MAX), u32::MAX); 2],
    }
}

fn max_server(i: u32) -> ServerState {
    ServerState {
        id: ServerId(u32::MAX - i),
        domain: u32::MAX,
        gpus: u32::MAX,
        free: u32::MAX,
    }
}

fn max_waiting(i: u64) -> WaitingJob {
    WaitingJob {
        job: max_job(i),
        reason: WaitReason::RetryDelay,
        limit: SpreadLimit::new(Level(u8::MAX), u32::MAX),
    }
}

/// A busy cluster: 300 servers, 200 running jobs, 100 waiting.
fn busy() -> (
    ClusterSummary,
    Vec<VcUsage>,
    Vec<ServerState>,
    Vec<RunningJob>,
    Vec<WaitingJob>,
) {
    let (cluster, vcs, jobs) = backlog(100);
    let servers = (0..300)
        .map(|i| ServerState {
            id: ServerId(i),
            domain: i / 15,
            gpus: 8,
            free: i % 3,
        })
        .collect();
    let running = (0..200u64)
        .map(|i| RunningJob {
            id: JobId(i),
            vc: VcId((i % 4) as u32),
            user: (i % 5) as u32,
            gpus: 4,
            submitted_s: 10 * i,
            started_s: 10 * i + 60,
            attempts: 1,
            attained_gpu_s: 4 * (50_000 - 10 * i),
            parts: vec![(ServerId((i % 300) as u32), 4)],
        })
        .collect();
    let waiting = jobs
        .into_iter()
        .enumerate()
        .map(|(i, job)| WaitingJob {
            limit: SpreadLimit::new(job.min_level, 0),
            job,
            reason: WaitReason::ALL[i % WaitReason::ALL.len()],
        })
        .collect();
    (cluster, vcs, servers, running, waiting)
}

impl Vectored for Reclaim {
    fn edge_views() -> Vec<(&'static str, ReclaimView)> {
        let (cluster, vcs, servers, running, waiting) = busy();
        vec![
            ("empty", ReclaimView::default()),
            (
                "max",
                ReclaimView {
                    now_s: u64::MAX,
                    cluster: max_cluster(),
                    vcs: (0..3).map(max_vc).collect(),
                    servers: (0..5).map(max_server).collect(),
                    running: (0..5).map(max_running).collect(),
                    waiting: (0..5).map(max_waiting).collect(),
                },
            ),
            (
                "busy",
                ReclaimView {
                    now_s: 100_000,
                    cluster,
                    vcs,
                    servers,
                    running,
                    waiting,
                },
            ),
        ]
    }

    fn later(view: &ReclaimView, rng: &mut Rng) -> Option<(ReclaimView, KnownChanges)> {
        let mut known = KnownChanges::default();
        let dt = dt(rng);
        let vcs = later_vcs(&view.vcs, rng, &mut known);
        let mut running = view.running.clone();
        for j in &mut running {
            j.attained_gpu_s = j
                .attained_gpu_s
                .wrapping_add(u64::from(j.gpus).wrapping_mul(dt));
        }
        if !running.is_empty() && rng.at(3) > 0 {
            running.remove(rng.at(running.len()));
        }
        if !running.is_empty() && rng.at(3) == 0 {
            let at = rng.at(running.len());
            running[at].attempts = running[at].attempts.wrapping_add(1);
            known.add_job(running[at].id);
        }
        let mut servers = view.servers.clone();
        if !servers.is_empty() {
            let at = rng.at(servers.len());
            servers[at].free = servers[at].free.wrapping_add(1);
        }
        let mut waiting: Vec<WaitingJob> = view
            .waiting
            .iter()
            .map(|w| WaitingJob {
                job: PendingJob {
                    waiting_s: w.job.waiting_s.wrapping_add(dt),
                    ..w.job
                },
                ..*w
            })
            .collect();
        if !waiting.is_empty() && rng.at(2) == 0 {
            let at = rng.at(waiting.len());
            waiting[at].reason = WaitReason::NoCapacity;
        }
        if !waiting.is_empty() && rng.at(3) == 0 {
            waiting.remove(rng.at(waiting.len()));
        }
        let next = ReclaimView {
            now_s: view.now_s.wrapping_add(dt),
            cluster: view.cluster.clone(),
            vcs,
            servers,
            running,
            waiting,
        };
        Some((next, known))
    }

    fn decisions(view: &ReclaimView, rng: &mut Rng) -> Vec<ReclaimDecision> {
        let pick = |n: usize, rng: &mut Rng| rng.at(n + 1).min(n);
        let stop = view
            .running
            .iter()
            .take(pick(view.running.len(), rng))
            .map(|j| j.id)
            .collect();
        let start = view
            .waiting
            .iter()
            .take(pick(view.waiting.len(), rng))
            .map(|w| w.job.id)
            .collect();
        vec![
            ReclaimDecision { stop, start },
            ReclaimDecision {
                stop: vec![JobId(u64::MAX)],
                start: vec![JobId(0), JobId(u64::MAX)],
            },
        ]
    }
}

impl Vectored for Retry {
    fn edge_views() -> Vec<(&'static str, RetryView)> {
        vec![
            ("empty", RetryView::default()),
            (
                "max",
                RetryView {
                    now_s: u64::MAX,
                    failures: FailureClass::ALL
                        .iter()
                        .enumerate()
                        .map(|(i, &class)| FailedAttempt {
                            job: JobId(u64::MAX - i as u64),
                            vc: VcId(u32::MAX),
                            user: u32::MAX,
                            gpus: u32::MAX,
                            attempt_gpus: u32::MAX,
                            attempts: u32::MAX,
                            run_s: u64::MAX,
                            class,
                            probe: i % 2 == 0,
                            failed_gpu_s: u64::MAX,
                        })
                        .collect(),
                },
            ),
        ]
    }

    fn later(_view: &RetryView, _rng: &mut Rng) -> Option<(RetryView, KnownChanges)> {
        None
    }

    fn decisions(view: &RetryView, rng: &mut Rng) -> Vec<RetryDecision> {
        let actions = view
            .failures
            .iter()
            .map(|f| match rng.at(3) {
                0 => RetryAction::Retry {
                    after_s: f.run_s.wrapping_mul(3),
                },
                1 => RetryAction::Probe {
                    gpus: 1,
                    run_s: 600,
                    after_s: u64::MAX,
                },
                _ => RetryAction::GiveUp,
            })
            .collect();
        vec![RetryDecision { actions }]
    }
}

impl Vectored for Defragment {
    fn edge_views() -> Vec<(&'static str, DefragmentView)> {
        let (cluster, _, servers, running, waiting) = busy();
        vec![
            ("empty", DefragmentView::default()),
            (
                "max",
                DefragmentView {
                    now_s: u64::MAX,
                    cluster: max_cluster(),
                    servers: (0..5).map(max_server).collect(),
                    running: (0..5).map(max_running).collect(),
                    waiting: (0..5).map(max_waiting).collect(),
                },
            ),
            (
                "busy",
                DefragmentView {
                    now_s: 100_000,
                    cluster,
                    servers,
                    running,
                    waiting,
                },
            ),
        ]
    }

    fn later(_view: &DefragmentView, _rng: &mut Rng) -> Option<(DefragmentView, KnownChanges)> {
        None
    }

    fn decisions(view: &DefragmentView, rng: &mut Rng) -> Vec<DefragmentDecision> {
        let moves = view
            .running
            .iter()
            .take(rng.at(4))
            .map(|j| Move {
                job: j.id,
                to: j
                    .parts
                    .iter()
                    .map(|&(s, g)| (ServerId(s.0.wrapping_add(1)), g))
                    .collect(),
            })
            .collect();
        vec![
            DefragmentDecision {
                moves,
                start: view.waiting.first().map(|w| w.job.id),
            },
            DefragmentDecision {
                moves: vec![Move {
                    job: JobId(u64::MAX),
                    to: vec![(ServerId(u32::MAX), u32::MAX)],
                }],
                start: Some(JobId(u64::MAX)),
            },
        ]
    }
}

#[test]
fn fairness_bytes_are_frozen() {
    slot_vectors::<Fairness>().check("fairness");
}

#[test]
fn locality_bytes_are_frozen() {
    slot_vectors::<Locality>().check("locality");
}

#[test]
fn gang_bytes_are_frozen() {
    slot_vectors::<Gang>().check("gang");
}

#[test]
fn reclaim_bytes_are_frozen() {
    slot_vectors::<Reclaim>().check("reclaim");
}

#[test]
fn retry_bytes_are_frozen() {
    slot_vectors::<Retry>().check("retry");
}

#[test]
fn defragment_bytes_are_frozen() {
    slot_vectors::<Defragment>().check("defragment");
}

/// The manifests a policy's `init` answers.
#[test]
fn manifest_bytes_are_frozen() {
    let mut v = Vectors::default();
    let manifests = [
        Manifest::default(),
        Manifest {
            view_changes: true,
            ..Manifest::default()
        },
        Manifest {
            queue_order: QueueOrder::Submit,
            view_changes: true,
            ..Manifest::default()
        },
        Manifest {
            queue_order: QueueOrder::AttainedBands(vec![3_600, 36_000, u64::MAX]),
            running: RunningScope::Borrowed,
            view_changes: true,
            gpu_types: false,
            server_types: false,
        },
        Manifest {
            queue_order: QueueOrder::Smallest,
            running: RunningScope::GiveBack {
                min_run_s: u64::MAX,
            },
            view_changes: false,
            gpu_types: false,
            server_types: false,
        },
        // Contract 2.2: takes the GPU types.
        Manifest {
            view_changes: true,
            gpu_types: true,
            ..Manifest::default()
        },
        // ... and the reclaim view's servers' types.
        Manifest {
            running: RunningScope::GiveBack { min_run_s: 60 },
            view_changes: true,
            gpu_types: true,
            server_types: true,
            ..Manifest::default()
        },
    ];
    for (i, m) in manifests.iter().enumerate() {
        let bytes = m.encode();
        v.add(&format!("manifest/{i}"), &bytes);
        assert_eq!(&Manifest::decode(&bytes).expect("decodes"), m);
    }
    // Older layouts and damage.
    let mut rng = Rng(0x6d61_6e69);
    let last = manifests[3].encode();
    for (k, bad) in damaged(&last, 6, &mut rng).into_iter().enumerate() {
        record(
            &mut v,
            &format!("manifest/damaged{k}"),
            Manifest::decode(&bad).ok().map(|m| m.encode()),
        );
    }
    // The layouts before the running scope and before view changes.
    let v1 = wire::encode(&QueueOrder::Smallest);
    let v2 = [
        wire::encode(&QueueOrder::AttainedBands(vec![60])),
        wire::encode(&RunningScope::GiveBack { min_run_s: 600 }),
    ]
    .concat();
    for (i, old) in [v1, v2].iter().enumerate() {
        v.add(&format!("manifest/layout{}", i + 1), old);
        record(
            &mut v,
            &format!("manifest/layout{}/decoded", i + 1),
            Manifest::decode(old).ok().map(|m| m.encode()),
        );
    }
    v.check("manifest");
}

/// `n` views of slot `S` with the GPU types beside them (contract 2.2),
/// from the kit's strategies, the same every run.
fn typed_samples<S: SlotViews>(n: u64) -> Vec<(S::View, crate::TypesView)> {
    (0..n)
        .map(|i| {
            let mut seed = [0u8; 32];
            seed[..8].copy_from_slice(&(0x7479_7065 + i).to_le_bytes());
            let mut runner = TestRunner::new_with_rng(
                Config::default(),
                TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
            );
            let (view, mut types) = crate::testing::types::typed_views::<S>()
                .new_tree(&mut runner)
                .expect("a typed view")
                .current();
            // Frozen before the servers' types (a trailing field, frozen
            // on its own: `types/servers`): these keep their bytes.
            types.servers.clear();
            (view, types)
        })
        .collect()
}

/// Type choices answering `types`: each job's most preferred type, every
/// other job.
fn choices_for(types: &crate::TypesView) -> crate::TypeChoices {
    crate::TypeChoices {
        choices: types
            .jobs
            .iter()
            .step_by(2)
            .filter_map(|j| {
                Some(crate::TypeChoice {
                    job: j.job,
                    gpu_type: *j.allowed.first()?,
                })
            })
            .collect(),
    }
}

/// The typed messages of slot `S` (contract 2.2) for `view` and `types`:
/// the view bare and as a view message, each with the types after it, and
/// `decision` with `choices` after it, bare and as a reply message; each
/// split and decoded back.
fn typed_case<S: SlotContract>(
    v: &mut Vectors,
    name: &str,
    (view, types): &(S::View, crate::TypesView),
    decision: &S::Decision,
) {
    let choices = choices_for(types);
    let mut bare = wire::encode_view::<S>(view);
    wire::append_typed(types, &mut bare);
    let mut message = Vec::new();
    wire::encode_view_message::<S>(None, view, &mut message);
    wire::append_typed(types, &mut message);
    let mut reply = wire::encode_decision::<S>(decision);
    wire::append_typed(&choices, &mut reply);
    let mut reply_message = Vec::new();
    wire::encode_reply_message::<S>(decision, view, &mut reply_message);
    wire::append_typed(&choices, &mut reply_message);
    v.add(&format!("{name}/view"), &bare);
    v.add(&format!("{name}/view_message"), &message);
    v.add(&format!("{name}/reply"), &reply);
    v.add(&format!("{name}/reply_message"), &reply_message);
    let (body, extra) = wire::split_typed(&bare).expect("splits");
    assert_eq!(&wire::decode_view::<S>(body).expect("a view"), view);
    let back: crate::TypesView = wire::decode_typed(extra.expect("types")).expect("types");
    assert_eq!(&back, types);
    let (body, extra) = wire::split_typed(&reply).expect("splits");
    assert_eq!(
        &wire::decode_decision::<S>(body, view).expect("a decision"),
        decision
    );
    let back: crate::TypeChoices = wire::decode_typed(extra.expect("choices")).expect("choices");
    assert_eq!(back, choices);
}

/// Contract 2.2's typed messages: fairness and reclaim views with their GPU
/// types (generated, and small edge cases), and replies with type choices.
#[test]
fn typed_bytes_are_frozen() {
    use crate::{ClassSpeeds, GpuTypeId, GpuTypeSummary, JobTypes, TypesView, VcTypeUsage};
    let mut v = Vectors::default();
    let full = TypesView {
        types: vec![GpuTypeSummary {
            id: GpuTypeId(u8::MAX),
            memory_gb: u32::MAX,
            total_gpus: u32::MAX,
            free_gpus: 0,
        }],
        jobs: vec![JobTypes {
            job: JobId(u64::MAX),
            allowed: vec![GpuTypeId(u8::MAX), GpuTypeId(0)],
            running: Some(GpuTypeId(u8::MAX)),
            class: u32::MAX,
        }],
        servers: Vec::new(),
        vcs: vec![VcTypeUsage {
            vc: VcId(u32::MAX),
            gpu_type: GpuTypeId(1),
            held_gpus: u32::MAX,
            nominal_gpus: Some(0),
            borrowing_limit_gpus: None,
        }],
        speeds: vec![ClassSpeeds {
            class: u32::MAX,
            per_type: vec![0, u32::MAX],
        }],
    };
    let one = FairnessView {
        jobs: vec![max_job(u64::MAX)],
        ..FairnessView::default()
    };
    let fairness = [
        (FairnessView::default(), TypesView::default()),
        (one, full.clone()),
    ];
    let ranked = |view: &FairnessView| FairnessDecision {
        order: view
            .jobs
            .iter()
            .map(|j| Ranked {
                job: j.id,
                eligible: j.id.0 % 2 == 0,
            })
            .collect(),
    };
    for (i, case) in fairness
        .iter()
        .chain(&typed_samples::<Fairness>(6))
        .enumerate()
    {
        typed_case::<Fairness>(
            &mut v,
            &format!("fairness/typed{i}"),
            case,
            &ranked(&case.0),
        );
    }
    let reclaim = [(ReclaimView::default(), full)];
    let stop_first = |view: &ReclaimView| ReclaimDecision {
        stop: view.running.iter().take(1).map(|j| j.id).collect(),
        start: view.waiting.iter().take(1).map(|w| w.job.id).collect(),
    };
    for (i, case) in reclaim
        .iter()
        .chain(&typed_samples::<Reclaim>(4))
        .enumerate()
    {
        typed_case::<Reclaim>(
            &mut v,
            &format!("reclaim/typed{i}"),
            case,
            &stop_first(&case.0),
        );
    }
    servers_case(&mut v);
    v.check("typed");
}

/// The servers' types (a trailing field): a reclaim view's types with them
/// end in their list; without them the bytes are those of the layout
/// before, and bytes without them read as none.
fn servers_case(v: &mut Vectors) {
    use crate::{GpuTypeId, TypesView};
    let mut with_servers = full_reclaim_types();
    with_servers.servers = vec![GpuTypeId(1), GpuTypeId(0), GpuTypeId(u8::MAX)];
    let encode = |t: &TypesView| {
        let mut out = Vec::new();
        super::postcard::encode_into(t, &mut out);
        out
    };
    let bytes = encode(&with_servers);
    v.add("types/servers", &bytes);
    let without = encode(&full_reclaim_types());
    assert_eq!(&bytes[..without.len()], &without[..]);
    let read: TypesView = wire::decode_typed(&without).expect("types without servers");
    assert_eq!(read, full_reclaim_types());
}

/// A reclaim view's types with every field set (its servers' types left out).
fn full_reclaim_types() -> crate::TypesView {
    use crate::{GpuTypeId, JobTypes, TypesView};
    TypesView {
        jobs: vec![JobTypes {
            job: JobId(3),
            allowed: vec![GpuTypeId(1)],
            running: Some(GpuTypeId(1)),
            class: 2,
        }],
        ..TypesView::default()
    }
}
