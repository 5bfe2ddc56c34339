//! Leader election with a `coordination.k8s.io` Lease, as kube-scheduler
//! does: the replica named in `holderIdentity` leads while it renews
//! `renewTime` within `leaseDurationSeconds`; another replica takes the
//! Lease over when it expires. Every write carries the `resourceVersion`
//! it read, so two replicas can never both win the same Lease.
//!
//! A leader that has not renewed for `lease_duration - renew` stops
//! leading on its own (before any other replica may take over), so two
//! replicas never bind at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use super::K8sError;

/// What one election step found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// This replica holds the Lease.
    Leader,
    /// Another replica does (its identity).
    Follower(String),
}

/// One replica's side of the election.
#[derive(Debug)]
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    renew: Duration,
    /// Until when this replica may act as leader (its last renewal plus
    /// the lease duration less one renew period).
    valid_until: Option<Instant>,
}

/// Whether a Lease held by someone else has expired at `now`.
pub fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let until = renewed.0.as_second().saturating_add(secs);
    now.as_second() > until
}

impl Elector {
    /// An elector for Lease `name` in `api`'s namespace.
    pub fn new(
        api: Api<Lease>,
        name: &str,
        identity: &str,
        duration_s: u64,
        renew_s: u64,
    ) -> Elector {
        Elector {
            api,
            name: name.to_string(),
            identity: identity.to_string(),
            duration: Duration::from_secs(duration_s),
            renew: Duration::from_secs(renew_s),
            valid_until: None,
        }
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this replica may act as leader now.
    pub fn leading(&self) -> bool {
        self.valid_until.is_some_and(|t| Instant::now() < t)
    }

    /// Until when this replica may act as leader, if it leads.
    pub fn valid_until(&self) -> Option<Instant> {
        self.valid_until.filter(|t| Instant::now() < *t)
    }

    /// How long to wait before the next [`Elector::step`].
    pub fn period(&self) -> Duration {
        self.renew
    }

    fn spec(&self, transitions: i32) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One step: create, renew or take over the Lease if this replica may;
    /// returns who leads. A conflict (another replica wrote first) is not
    /// an error: that replica leads.
    pub async fn step(&mut self) -> Result<Role, K8sError> {
        let started = Instant::now();
        let what = format!("lease {}", self.name);
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| K8sError::api(format!("reading {what}"), e))?;
        let result = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.spec(0)),
                };
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let holder = spec.holder_identity.clone().unwrap_or_default();
                if holder != self.identity
                    && !holder.is_empty()
                    && !expired(&spec, Timestamp::now())
                {
                    self.valid_until = None;
                    return Ok(Role::Follower(holder));
                }
                let mut next = self.spec(spec.lease_transitions.unwrap_or(0));
                if holder == self.identity {
                    next.acquire_time = spec.acquire_time.clone();
                } else {
                    next.lease_transitions = Some(next.lease_transitions.unwrap_or(0) + 1);
                }
                lease.spec = Some(next);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => {
                self.valid_until = Some(started + self.duration.saturating_sub(self.renew));
                Ok(Role::Leader)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                self.valid_until = None;
                Ok(Role::Follower("(another replica, just now)".into()))
            }
            Err(e) => Err(K8sError::api(format!("writing {what}"), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn leases_expire_after_their_duration() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let spec = LeaseSpec {
            renew_time: Some(MicroTime(t0)),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        };
        let at = |s: i64| Timestamp::from_second(t0.as_second() + s).unwrap();
        assert!(!expired(&spec, at(10)));
        assert!(!expired(&spec, at(15)));
        assert!(expired(&spec, at(16)));
        assert!(expired(&LeaseSpec::default(), at(0)));
    }
}
