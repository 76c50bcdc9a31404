//! Pub/sub between nodes: a PUBLISH made on this node goes, as one
//! [`wire::Publish`] frame per peer node, to every other node of the region
//! (and of every region, with `pubsub-across-regions`), where the server
//! hands it to its local subscribers through the hook it registered.
//!
//! Why these guarantees (`docs/pubsub.md`):
//! - **Order per publisher.** A connection publishes from one thread, one
//!   command after the other; each frame is queued, in that order, on the
//!   one outgoing link to each peer, which is one TCP stream. So a peer
//!   sees one publisher's messages in the order they were published.
//! - **At most once.** The frames ride the links' lossy class, like gossip:
//!   dropped when a link's queue is full (a slow or dead peer), when it
//!   reconnects, or when fault injection cuts it — never retried, never
//!   duplicated. Nothing here buffers without bound, and the publishing
//!   worker only queues a frame (the link's writer task on the replication
//!   service thread sends it), so it never waits on the network.

use super::*;

/// What the server does with a message that arrived from a peer.
pub type PublishHook = Box<dyn Fn(wire::Publish) + Send + Sync>;

impl Cluster {
    /// Registers the delivery of messages published on other nodes (once,
    /// at startup; a second call is ignored).
    pub fn on_publish(&self, hook: PublishHook) {
        let _ = self.publish_hook.set(hook);
    }

    /// Sends a message published here to every other node that may have
    /// subscribers for it: the region's, and with `pubsub-across-regions`
    /// every region's. Returns the number of nodes it was queued for.
    pub fn publish(self: &Arc<Self>, channel: &Bytes, message: &Bytes, sharded: bool) -> usize {
        let ring = self.ring.load();
        let mut sent = 0;
        for m in ring.members() {
            if m.node == self.settings.node
                || (!self.settings.pubsub_across_regions && self.other_region(&m.region))
            {
                continue;
            }
            let frame = Frame::new(Body::Publish(wire::Publish {
                channel: channel.clone(),
                message: message.clone(),
                sharded,
            }));
            if self.send(m.node, frame, true) {
                sent += 1;
            }
        }
        sent
    }

    /// A message a peer published: delivered here unless it comes from
    /// another region and this node does not take those.
    pub(super) fn on_published(&self, from_region: &str, p: wire::Publish) {
        if !self.settings.pubsub_across_regions && self.other_region(from_region) {
            return;
        }
        if let Some(hook) = self.publish_hook.get() {
            hook(p);
        }
    }
}
