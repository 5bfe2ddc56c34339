//! The conformance kit (feature `conformance`): put a policy, native or
//! built as a Wasm module, through every rule of the contract on thousands
//! of generated views, and through whole scheduler scenarios, in one line
//! of a test.
//!
//! ```
//! use gangway_core::conformance::{self, Options};
//! use gangway_plugin_sdk::{Fairness, FifoQuota};
//!
//! let report = conformance::policy::<Fairness>(FifoQuota, &Options::quick()).unwrap();
//! assert!(report.views >= 64);
//! ```
//!
//! What is checked, on every generated view of the slot
//! ([`gangway_plugin_sdk::testing::strategy`]: random topologies, virtual
//! clusters with and without quotas, jobs of 1 to 128 GPUs, waits, attained
//! service, empty and huge queues):
//!
//! * the answer is well-formed: the rules the core applies to every
//!   decision ([`crate::policy::SlotContract::validate`]: a permutation, one
//!   answer per job, levels and server bounds in range, only jobs of the
//!   view named);
//! * the policy does not panic or fail (a Wasm module: trap, budget, memory
//!   cap, refusal, a reply that does not decode);
//! * it is deterministic: the same view again, and a freshly made instance,
//!   give the same answer;
//! * it stays within [`Options::time_per_job`] per job of the view (plus a
//!   base allowance), so a round's cost stays proportional to its view;
//! * its answers do not depend on its history: after the generated views,
//!   the same instance is asked them again, with the slot's largest views
//!   ([`SlotViews::largest`]) among them, for [`Options::history`] calls
//!   in all, and each answer must be the first one that view got.
//!
//! A policy whose manifest takes the GPU types (contract 2.2: a fairness or
//! reclaim policy with `GPU_TYPES`) is also asked, on every view, with a
//! generated [`gangway_plugin_sdk::TypesView`] consistent with it
//! ([`gangway_plugin_sdk::testing::types`]: 1 to 4 types, each job's
//! allowed types, the VCs' use and quotas of each type, speeds by class or
//! none): its typed answer must pass the rules the core's guard checks (its
//! decision's, and type choices naming jobs of the view, each once, each
//! on one of the job's allowed types), be the same when asked again and by
//! a fresh instance, and stay within the time allowed. The report counts
//! these calls ([`Report::typed_calls`]); a failure's regression test
//! rebuilds the types too and checks them with [`check_typed_view`].
//!
//! A Wasm module is checked as hosts run it: under the engine's budgets
//! (the work budget included), and a 2.1 module's `-buffered` twin is
//! checked against the slot's own function on every call, the function
//! running on an instance of its own that lives as long as the twin's, so
//! both have long histories.
//!
//! And, through the real [`crate::Scheduler`] with the policy in its slot
//! (the same instance from scenario to scenario, after its history), on
//! generated cluster scenarios ([`scenario`]): invariants hold after every
//! round, no job is lost, no gang starts half; with
//! [`Options::liveness`], the oldest job that could start does start once
//! the arrivals stop.
//!
//! A failure names the check and the smallest failing view (proptest's
//! shrinking, then the slot's one step smaller views until none fails the
//! same way), printed as a complete regression test to paste: the view, what
//! the policy answered and [`check_view`] on it.

mod finding;
mod run;
pub mod scenario;
mod typed;

use std::time::Duration;

use gangway_plugin_sdk::{Configure, Policy};

pub use finding::{Finding, FindingKind, Report, Repro};
pub use run::{check, check_view};
pub use typed::check_typed_view;

use crate::policy::{BoxedBackend, Native};
use gangway_plugin_sdk::SlotContract;
use gangway_plugin_sdk::testing::SlotViews;

/// How hard to check.
#[derive(Clone, Debug)]
pub struct Options {
    /// Generated views per slot.
    pub cases: u32,
    /// Seed of the view generator (the same seed, the same views).
    pub seed: u64,
    /// The longest one call may take per job of its view, on top of
    /// [`Options::time_base`].
    pub time_per_job: Duration,
    /// The time any call may take, however small its view.
    pub time_base: Duration,
    /// Scheduler scenarios to run the policy through (0: none).
    pub scenarios: u32,
    /// Also require that the oldest job that fits the empty cluster starts
    /// in every scenario once arrivals stop (opt in: a policy may hold jobs
    /// by design, e.g. a quota).
    pub liveness: bool,
    /// Give up on a check that takes longer than this in all (views,
    /// shrinking a failure, scenarios); `None`: no limit. Shrinking a
    /// failure never takes more than a third of it (or 20 s).
    pub time_limit: Option<Duration>,
    /// Calls made on the instance of the generated views after them, each
    /// on a view it answered before or one of the slot's largest views,
    /// each answer compared with that view's first (0: none).
    pub history: u32,
}

impl Default for Options {
    /// 256 views, 16 scenarios, 1 ms per job plus 100 ms: generous enough
    /// for a debug build on a busy machine, tight enough to catch a policy
    /// quadratic in its queue; a history of 2,000 calls.
    fn default() -> Self {
        Options {
            cases: 256,
            seed: 0x6a6e_6777,
            time_per_job: Duration::from_millis(1),
            time_base: Duration::from_millis(100),
            scenarios: 16,
            liveness: false,
            time_limit: None,
            history: 2_000,
        }
    }
}

impl Options {
    /// A quicker check: 64 views, 4 scenarios, a history of 200 calls.
    pub fn quick() -> Options {
        Options {
            cases: 64,
            scenarios: 4,
            history: 200,
            ..Options::default()
        }
    }
}

/// Checks a native policy in slot `S`, making a fresh one with `make` when
/// it needs a fresh instance.
pub fn native<S, P>(name: &str, make: impl Fn() -> P, options: &Options) -> Result<Report, Finding>
where
    S: SlotContract + SlotViews,
    P: Policy<S> + Send + 'static,
{
    check::<S>(
        name,
        &mut || Ok(Box::new(Native::new(name, make())) as BoxedBackend<S>),
        options,
    )
    .map_err(|f| f.with_maker(finding::given_maker::<P>(name)))
}

/// Checks a policy value in slot `S` (its marker type), cloning it when
/// the kit needs a fresh instance: `conformance::policy::<Fairness>(MyPolicy,
/// &options)`, for any slot.
pub fn policy<S: SlotContract + SlotViews>(
    policy: impl Policy<S> + Clone + Send + 'static,
    options: &Options,
) -> Result<Report, Finding> {
    let name = type_name_of(&policy);
    native::<S, _>(name, || policy.clone(), options)
}

/// The name of `value`'s type.
fn type_name_of<T>(_value: &T) -> &'static str {
    std::any::type_name::<T>()
}

/// Checks `P` built from its default configuration (empty bytes), as a
/// policy crate's own test does.
pub fn defaults<S, P>(options: &Options) -> Result<Report, Finding>
where
    S: SlotContract + SlotViews,
    P: Policy<S> + Configure + Send + 'static,
{
    let name = std::any::type_name::<P>();
    check::<S>(
        name,
        &mut || {
            P::from_config(b"")
                .map(|p| Box::new(Native::new(name, p)) as BoxedBackend<S>)
                .map_err(|e| Finding::config(S::SLOT, name, &e.to_string()))
        },
        options,
    )
    .map_err(|f| {
        f.with_maker(format!(
            "Box::new(gangway_core::policy::Native::new({name:?}, \
             <{name} as gangway_plugin_sdk::Configure>::from_config(b\"\").unwrap()))"
        ))
    })
}

/// Checks every slot of a Wasm module (feature `wasm`), configured with
/// `config`: the very checks `policy-check` makes.
#[cfg(feature = "wasm")]
pub fn module(
    module: &crate::wasm::PolicyModule,
    config: &[u8],
    options: &Options,
) -> Result<Vec<Report>, Finding> {
    module
        .slots()
        .into_iter()
        .map(|slot| {
            gangway_plugin_sdk::with_slot!(slot, |S| wasm_slot::<S>(module, config, options))
        })
        .collect()
}

#[cfg(feature = "wasm")]
fn wasm_slot<S: SlotContract + SlotViews>(
    module: &crate::wasm::PolicyModule,
    config: &[u8],
    options: &Options,
) -> Result<Report, Finding> {
    check::<S>(
        module.name(),
        &mut || {
            // The module's `-buffered` twin checked against the slot's
            // own function on every view: what production runs, either path.
            module
                .backend_checking_twins::<S>(config)
                .map_err(|e| Finding::config(S::SLOT, module.name(), &e.to_string()))
        },
        options,
    )
    .map_err(|f| {
        let maker = module_maker(module.name(), S::SLOT, &format!("&{config:?}"));
        f.with_maker(maker)
    })
}

/// The expression that loads module file `path` and makes its `slot`
/// backend with the configuration bytes expression `config` (`&[]`,
/// `&std::fs::read("las.toml").unwrap()`), for a regression test.
#[cfg(feature = "wasm")]
pub fn module_maker(path: &str, slot: gangway_plugin_sdk::Slot, config: &str) -> String {
    let marker = finding::marker(slot);
    format!(
        "gangway_core::wasm::PolicyEngine::new(Default::default()).unwrap().load_file({path:?}).unwrap()\
         .backend::<gangway_plugin_sdk::{marker}>({config}).unwrap()"
    )
}
