//! Leader election on a `coordination.k8s.io/v1` Lease. Every write of the
//! controller checks [`Leader::ensure_leader`], so a replica that lost the
//! lease stops writing at once; on shutdown the holder releases the lease so
//! a standby takes over without waiting for it to expire.
//!
//! Expiry is judged as client-go's `leaderelection` does: never from the
//! holder's `renewTime` against our wall clock (a replica whose clock runs
//! ahead would take over a lease that is being renewed, and two replicas
//! would write), but from the local monotonic time at which this replica last
//! saw the record change. A standby takes over only after a full lease
//! duration of its own time without seeing a renewal, whatever the clocks
//! of the replicas say.
//!
//! Neither `kubert`'s lease nor `kube-leader-election` is used: both decide
//! from `renewTime` plus the duration against the local wall clock, the very
//! behaviour replaced here, and `kubert` would also pin the kube version.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{PostParams, ResourceExt},
};
use tokio::{sync::watch, time::Instant};
use tokio_util::sync::CancellationToken;

use super::error::Error;

/// Whether this replica may write, shared by every task of the controller.
#[derive(Clone)]
pub struct Leader {
    state: Arc<watch::Sender<bool>>,
    elected: Arc<AtomicBool>,
}

impl Leader {
    /// A leader without election (single replica, `--leader-elect=false`).
    pub fn always() -> Leader {
        let (tx, _) = watch::channel(true);
        Leader {
            state: Arc::new(tx),
            elected: Arc::new(AtomicBool::new(true)),
        }
    }

    fn candidate() -> Leader {
        let (tx, _) = watch::channel(false);
        Leader {
            state: Arc::new(tx),
            elected: Arc::new(AtomicBool::new(false)),
        }
    }

    /// True while this replica holds the lease.
    pub fn is_leader(&self) -> bool {
        self.elected.load(Ordering::Acquire)
    }

    /// The write gate: an error unless this replica holds the lease.
    pub fn ensure_leader(&self) -> Result<(), Error> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }

    /// Resolves once this replica holds the lease.
    pub async fn acquired(&self) {
        let mut rx = self.state.subscribe();
        let _ = rx.wait_for(|leader| *leader).await;
    }

    /// Resolves once this replica no longer holds the lease.
    pub async fn lost(&self) {
        let mut rx = self.state.subscribe();
        let _ = rx.wait_for(|leader| !*leader).await;
    }

    fn set(&self, leader: bool) {
        self.elected.store(leader, Ordering::Release);
        self.state.send_replace(leader);
    }
}

/// Lease settings (the controller-runtime defaults: 15 s, 10 s, 2 s).
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This replica's identity (pod name).
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// Give up leadership when renewals have failed this long.
    pub renew_deadline: Duration,
    /// Time between attempts.
    pub retry_period: Duration,
}

/// Start campaigning; the returned [`Leader`] flips as the lease is won and lost.
/// When `shutdown` is cancelled the lease is released and the task ends.
pub fn campaign(
    client: Client,
    config: LeaseConfig,
    shutdown: CancellationToken,
) -> (Leader, tokio::task::JoinHandle<()>) {
    let leader = Leader::candidate();
    let task = tokio::spawn(run(client, config, leader.clone(), shutdown));
    (leader, task)
}

async fn run(client: Client, config: LeaseConfig, leader: Leader, shutdown: CancellationToken) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut last_renewal = Instant::now();
    let mut observed = None;
    loop {
        match try_acquire_or_renew(&api, &config, &mut observed).await {
            Ok(true) => {
                if !leader.is_leader() {
                    tracing::info!(lease = %config.name, identity = %config.identity, "became leader");
                }
                last_renewal = Instant::now();
                leader.set(true);
            }
            Ok(false) => leader.set(false),
            Err(error) => {
                tracing::warn!(%error, lease = %config.name, "failed to renew the lease");
                if leader.is_leader() && last_renewal.elapsed() > config.renew_deadline {
                    tracing::error!(lease = %config.name, "lost leadership: renewals failed past the deadline");
                    leader.set(false);
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(config.retry_period) => {}
        }
    }
    if leader.is_leader() {
        leader.set(false);
        match release(&api, &config).await {
            Ok(()) => tracing::info!(lease = %config.name, "released the lease"),
            Err(error) => tracing::warn!(%error, "failed to release the lease"),
        }
    }
}

/// The Lease as this replica last saw it, and when, on its own monotonic
/// clock: what expiry is measured from.
struct Observed {
    /// The resourceVersion changes on every write, so a renewal is seen even
    /// when the holder's clock writes the same `renewTime` twice; the spec is
    /// kept too, for API servers (and tests) that reuse versions.
    record: (Option<String>, Option<LeaseSpec>),
    at: Instant,
}

impl Observed {
    /// Remember `lease`, restarting the clock only when the record changed.
    fn note(observed: &mut Option<Observed>, lease: &Lease) {
        let record = (lease.metadata.resource_version.clone(), lease.spec.clone());
        if observed.as_ref().is_none_or(|seen| seen.record != record) {
            *observed = Some(Observed {
                record,
                at: Instant::now(),
            });
        }
    }

    /// Whether a full lease duration (the record's own) has passed on our
    /// clock since the record last changed. A record without a duration
    /// promises nothing, so it has expired.
    fn expired(&self) -> bool {
        let seconds = self
            .record
            .1
            .as_ref()
            .and_then(|spec| spec.lease_duration_seconds);
        match seconds {
            Some(seconds) => {
                let duration = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
                self.at + duration < Instant::now()
            }
            None => true,
        }
    }
}

/// One round: Ok(true) when we hold the lease afterwards.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observed: &mut Option<Observed>,
) -> Result<bool, kube::Error> {
    // The wall clock only fills the record (for people and other tools);
    // no decision here reads it.
    let now = Timestamp::now();
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(held_by(config, now, None)),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(created) => {
                Observed::note(observed, &created);
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false), // another replica was faster
            Err(e) => Err(e),
        };
    };
    Observed::note(observed, &lease);
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let expired = observed.as_ref().is_none_or(Observed::expired);
    if holder != config.identity && !holder.is_empty() && !expired {
        return Ok(false);
    }
    let acquired = if holder == config.identity {
        spec.acquire_time.clone()
    } else {
        None
    };
    let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(holder != config.identity);
    let mut new_spec = held_by(config, now, acquired);
    new_spec.lease_transitions = Some(transitions);
    lease.spec = Some(new_spec);
    let renewing = holder == config.identity;
    // `replace` carries the resourceVersion we read: two replicas cannot both win.
    match api
        .replace(&lease.name_any(), &PostParams::default(), &lease)
        .await
    {
        Ok(written) => {
            Observed::note(observed, &written);
            Ok(true)
        }
        // Acquiring: another replica was faster. Renewing: our lease is still
        // valid (we just read it), so a conflict is a failed renewal, retried
        // until the renew deadline, not a loss of leadership on the spot.
        Err(kube::Error::Api(e)) if e.code == 409 && !renewing => Ok(false),
        Err(e) => Err(e),
    }
}

fn held_by(config: &LeaseConfig, now: Timestamp, acquired: Option<MicroTime>) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(config.lease_duration.as_secs().max(1) as i32),
        acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
        renew_time: Some(MicroTime(now)),
        ..LeaseSpec::default()
    }
}

/// Hand the lease over: empty holder, so a standby acquires it on its next try.
async fn release(api: &Api<Lease>, config: &LeaseConfig) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        return Ok(());
    };
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(());
    };
    if spec.holder_identity.as_deref() != Some(&config.identity) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    api.replace(&config.name, &PostParams::default(), &lease)
        .await
        .map(drop)
}
