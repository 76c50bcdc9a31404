//! Seeds given as host names (`--seeds db1.example:7379,…`): resolved to
//! peer addresses in the background, so a forming region can tell which
//! seeds it has seen (see `Cluster::may_found_region`). chitchat resolves
//! them itself for gossip; this is only the "have I seen every seed yet?"
//! question, which needs the address a seed's member publishes.

use super::*;

/// How often unresolved seeds are looked up again (a host whose name is
/// not in DNS yet, say while a deployment brings the hosts up).
const RETRY: Duration = Duration::from_secs(1);

/// How often resolved seeds are looked up again (a host may move).
const REFRESH: Duration = Duration::from_secs(30);

impl Cluster {
    /// Looks the seeds up until the process ends: every [`RETRY`] while
    /// one does not resolve, every [`REFRESH`] after.
    pub(super) async fn resolve_seeds(self: Arc<Self>) {
        loop {
            let mut all = Vec::with_capacity(self.settings.seeds.len());
            for seed in &self.settings.seeds {
                // An IP:port needs no lookup; a name is resolved through
                // the system resolver (/etc/hosts, DNS), off this thread.
                let addrs: Vec<SocketAddr> = match seed.parse::<SocketAddr>() {
                    Ok(a) => vec![a],
                    Err(_) => match tokio::net::lookup_host(seed.as_str()).await {
                        Ok(it) => it.collect(),
                        Err(e) => {
                            tracing::debug!("seed {seed} does not resolve yet: {e}");
                            Vec::new()
                        }
                    },
                };
                all.push(addrs);
            }
            let resolved = all.iter().all(|a| !a.is_empty());
            *self.seed_addrs.lock().unwrap_or_else(|e| e.into_inner()) = all;
            tokio::time::sleep(if resolved { REFRESH } else { RETRY }).await;
        }
    }

    /// The seeds no member of the current view was seen at (by any of a
    /// seed's addresses); a seed not resolved yet counts as unseen.
    pub(super) fn unseen_seeds(&self, ring: &Ring) -> Vec<String> {
        let addrs = self.seed_addrs.lock().unwrap_or_else(|e| e.into_inner());
        self.settings
            .seeds
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                addrs.get(*i).is_none_or(|a| {
                    !a.iter()
                        .any(|a| ring.members().iter().any(|m| m.peer == *a))
                })
            })
            .map(|(_, s)| s.clone())
            .collect()
    }
}
