//! Which kind of transaction the server holds open for this connection, as
//! far as the client can tell from what it sent and what came back.
//!
//! Owns only the bookkeeping behind the prompt's `(TX)` / `(MULTI)` mark and
//! the "your transaction was lost" warning on reconnect; the server stays the
//! authority. The rules are deliberately simple so they cannot drift far:
//!
//! - `BEGIN` answered without an error opens an Elsa transaction;
//!   `COMMIT`, `ABORT` and `ROLLBACK` close it whatever the answer — a
//!   successful commit, a `CONFLICT <key>` (the transaction lost validation
//!   and is gone), or an error saying there was none.
//! - `MULTI` answered without an error opens a Redis transaction; `EXEC` and
//!   `DISCARD` close it whatever the answer (`EXECABORT` included).
//! - Inside `MULTI` other commands are only queued, so nothing but `EXEC`
//!   and `DISCARD` changes the state; inside `BEGIN`, nothing but its
//!   closers does (a nested `BEGIN` is the server's to refuse).
//! - A lost connection closes either: the server drops a client's
//!   transaction with the client.

/// The transaction the prompt shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxState {
    /// No transaction: each command stands alone.
    #[default]
    None,
    /// Inside `BEGIN … COMMIT` (Elsa's interactive transaction).
    Begin,
    /// Inside `MULTI … EXEC` (commands are queued).
    Multi,
}

impl TxState {
    /// The state after `name` (any case) was sent and answered;
    /// `was_error` says whether the answer was an error reply.
    pub fn after(self, name: &[u8], was_error: bool) -> TxState {
        let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
        match self {
            // Inside MULTI every other command is only queued, BEGIN too.
            TxState::Multi if is("EXEC") || is("DISCARD") => TxState::None,
            TxState::Multi => TxState::Multi,
            TxState::Begin if is("COMMIT") || is("ABORT") || is("ROLLBACK") => TxState::None,
            TxState::Begin => TxState::Begin,
            TxState::None if was_error => TxState::None,
            TxState::None if is("BEGIN") => TxState::Begin,
            TxState::None if is("MULTI") => TxState::Multi,
            TxState::None => TxState::None,
        }
    }

    /// The mark after `host:port` in the prompt: `(TX)`, `(MULTI)` or none.
    pub fn mark(self) -> &'static str {
        match self {
            TxState::None => "",
            TxState::Begin => "(TX)",
            TxState::Multi => "(MULTI)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TxState::{self, Begin, Multi};

    fn run(steps: &[(&str, bool)]) -> Vec<TxState> {
        let mut s = TxState::None;
        steps
            .iter()
            .map(|(name, err)| {
                s = s.after(name.as_bytes(), *err);
                s
            })
            .collect()
    }

    #[test]
    fn begin_commit() {
        assert_eq!(
            run(&[
                ("BEGIN", false),
                ("PUT", false),
                ("get", false),
                ("commit", false)
            ]),
            [Begin, Begin, Begin, TxState::None]
        );
    }

    #[test]
    fn conflict_on_commit_closes() {
        assert_eq!(
            run(&[("BEGIN", false), ("PUT", false), ("COMMIT", true)]),
            [Begin, Begin, TxState::None]
        );
    }

    #[test]
    fn abort_and_rollback_close() {
        assert_eq!(run(&[("BEGIN", false), ("ABORT", false)])[1], TxState::None);
        assert_eq!(
            run(&[("begin", false), ("Rollback", true)])[1],
            TxState::None
        );
    }

    #[test]
    fn refused_begin_opens_nothing() {
        // Against plain Redis, BEGIN is an unknown command.
        assert_eq!(run(&[("BEGIN", true)]), [TxState::None]);
    }

    #[test]
    fn errors_inside_a_transaction_keep_it_open() {
        assert_eq!(
            run(&[("BEGIN", false), ("PUT", true), ("BEGIN", true)]),
            [Begin, Begin, Begin]
        );
    }

    #[test]
    fn multi_exec_and_discard() {
        assert_eq!(
            run(&[("MULTI", false), ("SET", false), ("EXEC", false)]),
            [Multi, Multi, TxState::None]
        );
        assert_eq!(
            run(&[("multi", false), ("DISCARD", false)]),
            [Multi, TxState::None]
        );
        // EXECABORT still ends the MULTI.
        assert_eq!(run(&[("MULTI", false), ("EXEC", true)])[1], TxState::None);
    }

    #[test]
    fn closers_of_the_other_kind_do_not_close() {
        assert_eq!(run(&[("MULTI", false), ("COMMIT", true)])[1], Multi);
        assert_eq!(run(&[("BEGIN", false), ("EXEC", true)])[1], Begin);
    }

    #[test]
    fn queued_begin_inside_multi_does_not_open() {
        assert_eq!(
            run(&[("MULTI", false), ("BEGIN", false), ("EXEC", false)]),
            [Multi, Multi, TxState::None]
        );
    }

    #[test]
    fn marks() {
        assert_eq!(TxState::None.mark(), "");
        assert_eq!(Begin.mark(), "(TX)");
        assert_eq!(Multi.mark(), "(MULTI)");
    }
}
