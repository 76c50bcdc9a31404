//! INFO's `# Clients` section, Redis 7.0's fields in its order
//! (`genRedisInfoString` in server.c).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::flag;
use crate::state::Shared;

/// The section's text, blank line included.
pub(crate) fn section(sh: &Shared) -> String {
    let reg = &sh.conns;
    // Redis keeps the peaks of the last few seconds; Elsa reports the
    // largest buffers held now, read from each connection's last publish.
    let (mut max_in, mut max_out, mut tracking) = (0, 0, 0);
    for c in reg.all() {
        let st = c.state();
        max_in = max_in.max(st.qbuf + st.qbuf_free);
        max_out = max_out.max(st.obl);
        if st.flags & flag::TRACKING != 0 {
            tracking += 1;
        }
    }
    let mut t = String::with_capacity(320);
    let _ = write!(
        t,
        "# Clients\r\n\
         connected_clients:{}\r\n\
         cluster_connections:{}\r\n\
         maxclients:{}\r\n\
         client_recent_max_input_buffer:{max_in}\r\n\
         client_recent_max_output_buffer:{max_out}\r\n\
         blocked_clients:{}\r\n\
         tracking_clients:{tracking}\r\n\
         clients_in_timeout_table:{}\r\n\r\n",
        sh.clients.load(Ordering::Relaxed),
        // Redis Cluster's bus links: Elsa has no Redis Cluster bus (its
        // peers talk on their own port), so 0, what Redis answers with
        // cluster mode off.
        0,
        sh.runtime
            .maxclients
            .load(std::sync::atomic::Ordering::Relaxed),
        reg.blocked(),
        reg.blocked_with_timeout(),
    );
    t
}
