//! What one backend has spent, and what its next entry into the module may
//! use: the lesser of the call's own budget, what its work budget's window
//! has left, what its fuel for the run (or period) has left and what its
//! round budget's window has left, in fuel and in time. Every entry is
//! counted, whatever it is for: a call, the instantiation and `init` of a
//! fresh instance, the host's twin check.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::config::{Budget, RoundBudget, SandboxConfig, WorkBudget};
use super::work::{Allowance, WorkMeter};
use crate::policy::{BudgetUnit, PolicyErrorKind};

/// Which bound an entry's fuel or deadline came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bound {
    /// The call's own budget (its fuel, wall-clock cap or deadline), or
    /// the engine's `deadline_at`.
    Call,
    /// What the work budget's window has left.
    Work,
    /// What the fuel for the run (or period) has left.
    Run,
    /// What the round budget's window has left.
    Rounds,
}

/// What one entry into the module may use, and what it was measured at.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    /// Fuel to arm (0 without fuel metering).
    pub(crate) fuel: u64,
    pub(crate) fuel_bound: Bound,
    /// The most time it may take, if less than the call's own.
    pub(crate) time: Option<Duration>,
    /// The work budget's allowance, when there is one.
    work: Option<Allowance>,
    /// When the entry was armed (its time counts from then).
    pub(crate) started: Option<Mark>,
}

/// How a backend tells the time its entries take: by the engine's epoch
/// ticks when it has a ticker (a read of a counter: an entry's time is
/// the ticks that fell within it, which over many entries sums to their
/// time, as a tick falls within an entry as often as its length is of a
/// tick), else by the system clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock<'a> {
    pub(crate) ticks: Option<(&'a AtomicU64, Duration)>,
}

/// A point in time on a [`Clock`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mark {
    Tick(u64),
    Instant(Instant),
}

impl Clock<'_> {
    /// Now.
    pub(crate) fn now(&self) -> Mark {
        match self.ticks {
            Some((ticks, _)) => Mark::Tick(ticks.load(Ordering::Relaxed)),
            None => Mark::Instant(Instant::now()),
        }
    }

    /// The time since `mark`.
    fn since(&self, mark: Mark) -> Duration {
        match (mark, self.ticks) {
            (Mark::Tick(then), Some((ticks, tick))) => {
                let n = ticks.load(Ordering::Relaxed).saturating_sub(then);
                tick.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))
            }
            (Mark::Instant(then), _) => then.elapsed(),
            (Mark::Tick(_), None) => Duration::ZERO,
        }
    }
}

/// One backend's spending (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Spending {
    /// Fuel used since the backend began (or its period did).
    run_fuel: u64,
    period_start: Option<Instant>,
    work: WorkMeter,
    rounds: RoundWindow,
}

impl Spending {
    /// A new round begins (the scheduler's).
    pub(crate) fn new_round(&mut self) {
        self.rounds.new_round();
    }

    /// Starts a new fuel period when the last one is over (the backend's
    /// fuel for the run is allowed again); returns whether it did.
    pub(crate) fn renew_period(&mut self, config: &SandboxConfig) -> bool {
        let Some(period) = config.fuel_period else {
            return false;
        };
        let now = Instant::now();
        let start = *self.period_start.get_or_insert(now);
        if now.duration_since(start) < period {
            return false;
        }
        self.period_start = Some(now);
        self.run_fuel = 0;
        true
    }

    /// A call begins: a round of its own if the round already had one (a
    /// call outside a scheduler's rounds).
    pub(crate) fn call(&mut self) {
        self.rounds.call();
    }

    /// What an entry whose slot's built-ins would cost `cost` may use, or
    /// the error of an entry that finds a budget spent (counted in the
    /// work window as an entry that used nothing).
    pub(crate) fn grant(
        &mut self,
        config: &SandboxConfig,
        cost: u64,
    ) -> Result<Grant, PolicyErrorKind> {
        let per_call = match config.budget {
            Budget::Fuel(n) => n,
            Budget::Deadline(_) => 0,
        };
        let mut grant = Grant {
            fuel: per_call,
            fuel_bound: Bound::Call,
            time: None,
            work: None,
            started: None,
        };
        if let Some(limit) = config.fuel_per_backend.filter(|_| per_call > 0) {
            let left = limit.saturating_sub(self.run_fuel);
            if left == 0 {
                return Err(PolicyErrorKind::RunBudget(limit));
            }
            grant.narrow(left, Bound::Run);
        }
        if let Some(budget) = config.round_budget {
            let (fuel, time) = self.rounds.spent(&budget);
            let (most_fuel, most_time) = budget.scaled(&config.budget);
            if per_call > 0 {
                let left = most_fuel.saturating_sub(fuel);
                if left == 0 {
                    return Err(round_error(config, BudgetUnit::Fuel, fuel));
                }
                grant.narrow(left, Bound::Rounds);
            }
            let left = most_time.saturating_sub(time);
            if left.is_zero() {
                return Err(round_error(config, BudgetUnit::Time, millis(time)));
            }
            grant.time = (left < own_time(config)).then_some(left);
        }
        if let (Some(budget), true) = (config.work_budget, per_call > 0) {
            let measure = cost.max(budget.floor).min(budget.most_measured(per_call));
            let allowance = self.work.allowance(&budget, measure);
            if allowance.fuel == 0 {
                self.work.record(&budget, allowance.measure, 0);
                return Err(work_error(&budget, allowance.allowed, allowance.spent));
            }
            grant.narrow(allowance.fuel, Bound::Work);
            grant.work = Some(allowance);
        }
        Ok(grant)
    }

    /// Records what the entry `grant` was for used: `used` fuel, and the
    /// time on `clock` since it was armed.
    pub(crate) fn record(
        &mut self,
        config: &SandboxConfig,
        clock: Clock<'_>,
        grant: &Grant,
        used: u64,
    ) {
        self.run_fuel = self.run_fuel.saturating_add(used);
        if let (Some(a), Some(budget)) = (grant.work, config.work_budget) {
            self.work.record(&budget, a.measure, used);
        }
        let took = grant.started.map_or(Duration::ZERO, |t| clock.since(t));
        self.rounds.record(used, took);
    }

    /// The error an entry under `grant` that used `used` fuel failed with,
    /// `kind` as the sandbox classified it, named by the budget that bound
    /// it: running out of what the work budget, the run's fuel or the
    /// round budget left is that budget's error, not the call's own.
    pub(crate) fn error(
        &mut self,
        config: &SandboxConfig,
        grant: &Grant,
        used: u64,
        kind: PolicyErrorKind,
    ) -> PolicyErrorKind {
        match kind {
            PolicyErrorKind::OutOfFuel(n) => match (grant.fuel_bound, grant.work) {
                (Bound::Work, Some(a)) => {
                    let budget = config.work_budget.unwrap_or_default();
                    work_error(&budget, a.allowed, a.spent.saturating_add(used))
                }
                (Bound::Run, _) => PolicyErrorKind::RunBudget(config.fuel_per_backend.unwrap_or(n)),
                (Bound::Rounds, _) => {
                    let budget = config.round_budget.unwrap_or_default();
                    round_error(config, BudgetUnit::Fuel, self.rounds.spent(&budget).0)
                }
                _ => PolicyErrorKind::OutOfFuel(n),
            },
            PolicyErrorKind::DeadlineExceeded(_) if grant.time.is_some() => {
                let budget = config.round_budget.unwrap_or_default();
                round_error(
                    config,
                    BudgetUnit::Time,
                    millis(self.rounds.spent(&budget).1),
                )
            }
            kind => kind,
        }
    }
}

impl Grant {
    /// Lowers the fuel to `fuel` if that is less, bound by `bound`.
    fn narrow(&mut self, fuel: u64, bound: Bound) {
        if fuel < self.fuel {
            self.fuel = fuel;
            self.fuel_bound = bound;
        }
    }
}

/// The wall-clock time a call may take by itself (its deadline budget or
/// its cap), `Duration::MAX` for none.
fn own_time(config: &SandboxConfig) -> Duration {
    match config.budget {
        Budget::Deadline(d) => d,
        Budget::Fuel(_) => config.wall_clock_cap.unwrap_or(Duration::MAX),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The error of a call past its work budget.
fn work_error(budget: &WorkBudget, allowed: u64, spent: u64) -> PolicyErrorKind {
    PolicyErrorKind::WorkBudget {
        spent,
        allowed,
        factor: budget.factor,
        window: budget.window,
    }
}

/// The error of a call past the round budget of `config`, `spent` in `unit`.
fn round_error(config: &SandboxConfig, unit: BudgetUnit, spent: u64) -> PolicyErrorKind {
    let budget = config.round_budget.unwrap_or_default();
    let (fuel, time) = budget.scaled(&config.budget);
    PolicyErrorKind::RoundBudget {
        spent,
        allowed: match unit {
            BudgetUnit::Fuel => fuel,
            BudgetUnit::Time => millis(time),
        },
        unit,
        rounds: budget.rounds,
    }
}

/// What the entries of the last rounds used, round by round, and in all.
#[derive(Debug, Default)]
struct RoundWindow {
    /// The current round's number.
    round: u64,
    /// Whether the current round had a call.
    called: bool,
    /// (round, fuel, time) of the rounds that used anything, oldest first.
    used: VecDeque<(u64, u64, Duration)>,
    /// Their sums.
    fuel: u64,
    time: Duration,
}

impl RoundWindow {
    fn new_round(&mut self) {
        self.round += 1;
        self.called = false;
    }

    /// A call: a round of its own if the current one had a call already.
    fn call(&mut self) {
        if self.called {
            self.new_round();
        }
        self.called = true;
    }

    fn record(&mut self, fuel: u64, time: Duration) {
        self.fuel = self.fuel.saturating_add(fuel);
        self.time = self.time.saturating_add(time);
        match self.used.back_mut() {
            Some((round, f, t)) if *round == self.round => {
                *f = f.saturating_add(fuel);
                *t = t.saturating_add(time);
            }
            _ => self.used.push_back((self.round, fuel, time)),
        }
    }

    /// Fuel and time used over the window of `budget` ending with the
    /// current round (rounds before it forgotten).
    fn spent(&mut self, budget: &RoundBudget) -> (u64, Duration) {
        self.forget(budget);
        (self.fuel, self.time)
    }

    /// Forgets the rounds before the window of `budget` ending with the
    /// current round.
    fn forget(&mut self, budget: &RoundBudget) {
        let first = self
            .round
            .saturating_sub(u64::from(budget.rounds.max(1)) - 1);
        while let Some((_, f, t)) = self.used.front().filter(|(r, _, _)| *r < first).copied() {
            self.used.pop_front();
            self.fuel = self.fuel.saturating_sub(f);
            self.time = self.time.saturating_sub(t);
        }
    }
}
