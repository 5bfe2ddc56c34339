//! Budgets that fit the work: a module may use a multiple of what its slot's
//! built-in policies cost on the same views, over a sliding window of its
//! recent entries (calls, the `init` of each fresh instance, the host's
//! twin checks), each entry charged at most a two-`factor`th of the
//! per-call fuel ([`WorkBudget::most_measured`]). A module that burns
//! more than half the per-call fuel on every call runs out of this
//! allowance within its first calls, its calls fail and its guard
//! quarantines it; one slower than the built-ins but under that is held to
//! `factor` times their cost, and the round budget
//! ([`super::config::RoundBudget`]) bounds what any module costs over a
//! window of rounds whatever its views. Fuel is deterministic, so the same
//! run quarantines at the same call every time.

use std::collections::VecDeque;

use super::config::WorkBudget;

/// A backend's recent calls under its [`WorkBudget`]: each call's measure
/// (what the built-ins would cost, at least the floor) and the fuel it
/// used.
#[derive(Debug, Default)]
pub(crate) struct WorkMeter {
    calls: VecDeque<(u64, u64)>,
    measure: u64,
    spent: u64,
}

/// What a call may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Allowance {
    /// This call's measure.
    pub(crate) measure: u64,
    /// The fuel left for it (0: none).
    pub(crate) fuel: u64,
    /// What the window allows in all, and what it has used.
    pub(crate) allowed: u64,
    pub(crate) spent: u64,
}

impl WorkMeter {
    /// What an entry measured at `measure` may use.
    pub(crate) fn allowance(&self, budget: &WorkBudget, measure: u64) -> Allowance {
        // The window holds the call about to be made and the ones before it.
        let keep = usize::try_from(budget.window.max(1) - 1).unwrap_or(usize::MAX);
        let skip = self.calls.len().saturating_sub(keep);
        let (old_measure, old_spent) = self
            .calls
            .iter()
            .take(skip)
            .fold((0u64, 0u64), |(m, s), (cm, cs)| (m + cm, s + cs));
        let allowed = budget
            .factor
            .saturating_mul(self.measure - old_measure + measure);
        let spent = self.spent - old_spent;
        Allowance {
            measure,
            fuel: allowed.saturating_sub(spent),
            allowed,
            spent,
        }
    }

    /// Records a call: its measure and the fuel it used.
    pub(crate) fn record(&mut self, budget: &WorkBudget, measure: u64, spent: u64) {
        self.calls.push_back((measure, spent));
        self.measure = self.measure.saturating_add(measure);
        self.spent = self.spent.saturating_add(spent);
        let window = usize::try_from(budget.window.max(1)).unwrap_or(usize::MAX);
        while self.calls.len() > window {
            if let Some((m, s)) = self.calls.pop_front() {
                self.measure -= m;
                self.spent -= s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call of a slot costing 1,000 + 100 per job, on 100 jobs.
    const MEASURE: u64 = 11_000;

    fn budget() -> WorkBudget {
        WorkBudget {
            factor: 10,
            window: 4,
            floor: 2_000,
        }
    }

    #[test]
    fn a_call_may_use_what_the_window_has_left() {
        let (b, mut m) = (budget(), WorkMeter::default());
        // 11,000 units measured, 110,000 allowed.
        let a = m.allowance(&b, MEASURE);
        assert_eq!((a.measure, a.fuel), (11_000, 110_000));
        m.record(&b, a.measure, 100_000);
        // The next call: 220,000 allowed over both, 100,000 used.
        assert_eq!(m.allowance(&b, MEASURE).fuel, 120_000);
    }

    #[test]
    fn calls_leave_the_window() {
        let (b, mut m) = (budget(), WorkMeter::default());
        m.record(&b, 11_000, 440_000);
        for _ in 0..2 {
            m.record(&b, 11_000, 0);
        }
        // The costly call is still among the last four: nothing left.
        assert_eq!(m.allowance(&b, MEASURE).fuel, 0);
        m.record(&b, 11_000, 0);
        // Now it is not.
        assert_eq!(m.allowance(&b, MEASURE).fuel, 440_000);
    }
}
