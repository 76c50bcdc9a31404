//! What a connection does with a transaction's deferred effects: a script's
//! PUBLISH kept until its transaction commits, then sent.

use super::*;
use crate::cmd::Control;
use crate::conn::Conn;
use crate::pubsub::Space;
use bytes::Bytes;

impl Conn {
    /// PUBLISH / SPUBLISH inside a script: answers how many subscribers
    /// would receive the message now, and sends it once the script's
    /// transaction commits.
    pub(crate) fn defer_publish(&mut self, c: Control, args: &[Bytes]) {
        let space = match c {
            Control::Spublish => Space::Shard,
            _ => Space::Plain,
        };
        let receivers = self.shared.pubsub.receivers(space, &args[1]);
        self.s.effects.push(Effect::Publish {
            space,
            channel: args[1].clone(),
            payload: args[2].clone(),
        });
        self.w().int(receivers as i64);
    }

    /// Forgets the effects recorded since `mark` (an attempt that lost, a
    /// script that failed, a transaction aborted).
    pub(crate) fn drop_effects(&mut self, mark: usize) {
        self.s.effects.truncate(mark);
    }

    /// The transaction committed: takes the effects recorded since `mark`,
    /// in order. Deferred queued commands are run and answered at the end
    /// of the output; each answers where its reply went, by slot.
    pub(crate) async fn take_effects(
        &mut self,
        mark: usize,
    ) -> Vec<(usize, std::ops::Range<usize>)> {
        if self.s.effects.len() <= mark {
            return Vec::new();
        }
        let effects = self.s.effects.split_off(mark);
        let db = self.s.db;
        let mut answered = Vec::new();
        for e in effects {
            match e {
                Effect::Publish {
                    space,
                    channel,
                    payload,
                } => {
                    self.publish_now(space, &channel, &payload);
                }
                Effect::Queued { slot, c, args, db } => {
                    self.s.db = db;
                    let start = self.out.len();
                    Box::pin(self.run_queued(c, &args)).await;
                    answered.push((slot, start..self.out.len()));
                }
            }
        }
        self.s.db = db;
        answered
    }
}
