//! The hand-off between a script thread and its connection's task: each
//! `redis.call` is a message one way and the reply the other. Both sides
//! poll briefly before they sleep, since waking a sleeping thread cost
//! more than the call itself (issue 41, defect 11). Calls on keys the
//! script's transaction already holds skip it (`super::inline`).

use std::sync::mpsc::Receiver;

use super::convert::Reply;

/// How long a script thread spins for its connection's answer before it
/// sleeps on the channel, and the connection's task for the script's
/// next call (`run::next_event`). A call takes the connection a few µs;
/// waking a sleeping thread costs as much again on each side, which made
/// a script's calls about 18 µs each against Redis's 1–2 (issue 41,
/// defect 11: 100,000 SADDs in one script took 10× Redis's time).
pub const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Polls `poll` until it breaks, for up to [`SPIN`] (the clock read once
/// every 64 polls); `None` when it did not break in time.
pub fn spin<T>(mut poll: impl FnMut() -> std::ops::ControlFlow<T>) -> Option<T> {
    let until = std::time::Instant::now() + SPIN;
    for n in 0u32.. {
        if let std::ops::ControlFlow::Break(t) = poll() {
            return Some(t);
        }
        if n % 64 == 63 {
            if std::time::Instant::now() >= until {
                return None;
            }
            // Lets the other side run when the cores are all busy: on a
            // two-core machine a script thread, its shard thread and a
            // client spinning for each other left the one awaited
            // waiting for a core (BullMQ's job removals, 2026-12-04).
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
    None
}

/// The connection's answer to the call just sent: spun for up to
/// [`SPIN`], then slept for. `None` when the connection is gone.
pub fn answer(answers: &Receiver<Reply>) -> Option<Reply> {
    use std::ops::ControlFlow::{Break, Continue};
    use std::sync::mpsc::TryRecvError;
    let polled = spin(|| match answers.try_recv() {
        Ok(r) => Break(Some(r)),
        Err(TryRecvError::Disconnected) => Break(None),
        Err(TryRecvError::Empty) => Continue(()),
    });
    match polled {
        Some(r) => r,
        None => answers.recv().ok(),
    }
}
