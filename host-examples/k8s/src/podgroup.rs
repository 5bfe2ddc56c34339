//! The scheduler-plugins PodGroup (`scheduling.x-k8s.io/v1alpha1`), the
//! fields Gangway reads and writes. Its CRD, `manifests/podgroup-crd.yaml`,
//! is scheduler-plugins' own schema plus `status.conditions`, where Gangway
//! writes why a gang waits.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};

/// A PodGroup: a gang of pods that start together or not at all.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PodGroup {
    /// `scheduling.x-k8s.io/v1alpha1`.
    #[serde(rename = "apiVersion", default = "api_version")]
    pub api_version: String,
    /// `PodGroup`.
    #[serde(default = "kind")]
    pub kind: String,
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What the gang needs.
    #[serde(default)]
    pub spec: PodGroupSpec,
    /// What the scheduler says of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodGroupStatus>,
}

/// A PodGroup's spec.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Pods that must all be placed for any to start (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i64>,
    /// Seconds the gang may take to be placed whole: a gang still short of
    /// `minMember` pods after it is reported `ScheduleTimeout`, and a start
    /// waiting for evicted pods gives its GPUs up after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i64>,
    /// The least the cluster must have free (by resource, GPUs included)
    /// for the gang to be placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
}

/// A PodGroup's status (the fields Gangway writes).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// `Pending`, `Scheduled`, `Running`, `Finished`, `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why it waits (type `Scheduled`, reason the wait reason in
    /// PascalCase), or that it was placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

fn api_version() -> String {
    "scheduling.x-k8s.io/v1alpha1".into()
}

fn kind() -> String {
    "PodGroup".into()
}

impl kube::Resource for PodGroup {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "PodGroup".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "scheduling.x-k8s.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "podgroups".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
