//! What a connection keeps of its own CLIENT settings (REPLY, NO-EVICT)
//! and its output peak, for the commands of `super::command`.

use bytes::Bytes;

/// A connection's own CLIENT REPLY and NO-EVICT state (Redis's
/// `CLIENT_REPLY_OFF`, `CLIENT_REPLY_SKIP`, `CLIENT_REPLY_SKIP_NEXT`,
/// `CLIENT_NO_EVICT`).
#[derive(Default)]
pub(crate) struct Local {
    pub reply_off: bool,
    pub skip_this: bool,
    pub skip_next: bool,
    pub no_evict: bool,
    /// The output buffer's peak length since the last publish (`rbp`).
    pub out_peak: usize,
    /// The name of the command about to run when it may block (`conn`).
    pub blocking_cmd: Option<Bytes>,
}

impl Local {
    /// True when some reply may be suppressed: the connection then runs
    /// its commands one at a time (the rare path).
    #[inline]
    pub fn quiet(&self) -> bool {
        self.reply_off || self.skip_this || self.skip_next
    }

    /// After a command: is its reply dropped? Then SKIP's next command
    /// becomes the one skipped (Redis's `commandProcessed`).
    pub fn after_command(&mut self) -> bool {
        let drop = self.reply_off || self.skip_this;
        self.skip_this = false;
        if self.skip_next {
            self.skip_this = true;
            self.skip_next = false;
        }
        drop
    }
}
