//! A module's warm-up: every slot instantiated with empty configuration and
//! called once on a small view, its reply decoded and validated, before the
//! engine hands the module out.

use gangway_plugin_sdk::{
    ClusterSummary, DefragmentView, FairnessView, Level, LevelSummary, QueueView, ReclaimView,
    RetryView, SlotContract, VcId, VcUsage, with_slot,
};
use gangway_plugin_sdk::{Defragment, Fairness, Gang, Locality, Reclaim, Retry};

use super::error::{WasmError, WasmErrorKind};
use super::module::PolicyModule;
use crate::policy::PolicyError;

impl PolicyModule {
    /// Instantiates every slot with empty configuration and calls it once on
    /// an empty view, checking the reply decodes and validates.
    pub(crate) fn warm_up(&self) -> Result<(), WasmError> {
        for slot in self.slots() {
            with_slot!(slot, |S| self.warm::<S>())?;
        }
        Ok(())
    }

    fn warm<S: SlotContract + WarmUp>(&self) -> Result<(), WasmError> {
        let mut backend = self.backend::<S>(b"")?;
        let view = S::warm_up_view();
        let result = backend.decide(&view).and_then(|d| {
            S::validate(&view, &d).map_err(|e| PolicyError::new(S::SLOT, self.name(), e.into()))
        });
        result.map_err(|source| WasmError::of(&self.name, WasmErrorKind::WarmUp(source)))
    }
}

/// The view a slot is warmed up with: a small cluster, one VC, no jobs.
trait WarmUp: SlotContract {
    fn warm_up_view() -> Self::View;
}

fn warm_cluster() -> ClusterSummary {
    let level = LevelSummary {
        domains: 1,
        max_domain_gpus: 8,
        max_free_gpus: 8,
    };
    ClusterSummary {
        total_gpus: 8,
        free_gpus: 8,
        server_level: Level(2),
        levels: vec![level, level, level],
    }
}

fn warm_vcs() -> Vec<VcUsage> {
    vec![VcUsage {
        id: VcId(0),
        weight: 1,
        ..VcUsage::default()
    }]
}

impl WarmUp for Fairness {
    fn warm_up_view() -> FairnessView {
        FairnessView {
            cluster: warm_cluster(),
            vcs: warm_vcs(),
            ..FairnessView::default()
        }
    }
}

impl WarmUp for Locality {
    fn warm_up_view() -> QueueView {
        QueueView {
            cluster: warm_cluster(),
            ..QueueView::default()
        }
    }
}

impl WarmUp for Gang {
    fn warm_up_view() -> QueueView {
        Locality::warm_up_view()
    }
}

impl WarmUp for Reclaim {
    fn warm_up_view() -> ReclaimView {
        ReclaimView {
            cluster: warm_cluster(),
            vcs: warm_vcs(),
            ..ReclaimView::default()
        }
    }
}

impl WarmUp for Retry {
    fn warm_up_view() -> RetryView {
        RetryView::default()
    }
}

impl WarmUp for Defragment {
    fn warm_up_view() -> DefragmentView {
        DefragmentView {
            cluster: warm_cluster(),
            ..DefragmentView::default()
        }
    }
}
