//! Listings of a failing run (commands numbered as sent, restarts and
//! rules shown where they happened) and the shrinker that cuts a failing
//! sequence down to the items that still make it fail the same way.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::gen::{well_formed, Step};
use crate::gen_rdiff::{Clean, Item, RSequence};
use crate::run::{run, Failure};

/// The items of `seq` up to `upto` (inclusive), numbered as sent, the
/// command `mark` marked, rules noted where they were applied.
pub fn listing(
    seq: &RSequence,
    upto: usize,
    mark: Option<usize>,
    notes: &BTreeMap<usize, Vec<String>>,
) -> String {
    let mut out = String::new();
    let mut n = 0;
    let mut line = |out: &mut String, text: String| {
        let m = if Some(n) == mark { "  <-- differs" } else { "" };
        let _ = writeln!(out, "    {:>3}  {text}{m}", n + 1);
        n += 1;
    };
    for (i, item) in seq.items.iter().enumerate().take(upto + 1) {
        match item {
            Item::Step { step, .. } => {
                for c in &step.cmds {
                    line(&mut out, c.line());
                }
                if step.sleep_ms > 0 {
                    let _ = writeln!(out, "         (sleep {} ms)", step.sleep_ms);
                }
            }
            Item::Begin { level, cmds } => {
                let head = level.map_or("BEGIN".to_string(), |l| format!("BEGIN {l}"));
                line(&mut out, head);
                for c in cmds {
                    line(&mut out, c.line());
                }
                line(&mut out, "COMMIT   (redis: MULTI … EXEC)".into());
            }
            Item::Restart { kind, sleep_ms } => {
                if *sleep_ms > 0 {
                    let _ = writeln!(out, "         (quiet {sleep_ms} ms)");
                }
                let _ = writeln!(out, "         === restart both: {kind} ===");
            }
        }
        for note in notes.get(&i).into_iter().flatten() {
            let _ = writeln!(out, "         [{note}]");
        }
    }
    out
}

/// The number of commands and restarts in `items`.
fn size(items: &[Item]) -> (usize, usize) {
    let cmds = items.iter().map(Item::commands).sum();
    let restarts = items
        .iter()
        .filter(|i| matches!(i, Item::Restart { .. }))
        .count();
    (cmds, restarts)
}

/// A candidate the runner can replay faithfully: restarts and BEGIN blocks
/// at clean points, and the base generator's own constraints (no expiry
/// sleep inside MULTI, no flush while watching).
fn valid(items: &[Item]) -> bool {
    let mut clean = Clean::default();
    let mut steps: Vec<Step> = Vec::new();
    for it in items {
        match it {
            Item::Step { step, .. } => {
                step.cmds.iter().for_each(|c| clean.after(c));
                steps.push(step.clone());
            }
            _ if !clean.is_clean() => return false,
            _ => {}
        }
    }
    well_formed(&steps)
}

/// A failing sequence cut down.
pub struct Shrunk {
    pub seq: RSequence,
    pub failure: Failure,
    pub notes: BTreeMap<usize, Vec<String>>,
    pub runs: usize,
}

impl Shrunk {
    pub fn text(&self) -> String {
        let (cmds, restarts) = size(
            &self.seq.items[..=self
                .failure
                .item
                .min(self.seq.items.len().saturating_sub(1))],
        );
        format!(
            "  minimal repro ({cmds} commands, {restarts} restarts, snapshot-interval-sec {}, \
             {} shrink runs):\n{}{}\n",
            self.seq.snapshot_sec,
            self.runs,
            listing(
                &self.seq,
                self.failure.item,
                self.failure.command,
                &self.notes
            ),
            self.failure.detail
        )
    }
}

/// Delta debugging over items: drops chunks (halves, quarters, … single
/// items) while the run still fails with the same signature, at most
/// `max_runs` runs. Each run starts fresh servers, so this is slow.
pub fn shrink(seq: &RSequence, found: &Failure, max_runs: usize) -> Option<Shrunk> {
    let mut runs = 0;
    let mut cur: Vec<Item> = seq.items[..(found.item + 1).min(seq.items.len())].to_vec();
    let mut best: Option<Shrunk> = None;
    let mut chunk = cur.len().div_ceil(2).max(1);
    loop {
        let mut removed = false;
        let mut start = 0;
        while start < cur.len() && runs < max_runs {
            let end = (start + chunk).min(cur.len());
            let cand: Vec<Item> = cur[..start].iter().chain(&cur[end..]).cloned().collect();
            if cand.is_empty() || !valid(&cand) {
                start = end;
                continue;
            }
            runs += 1;
            let s = RSequence {
                seed: seq.seed,
                items: cand,
                snapshot_sec: seq.snapshot_sec,
            };
            let hit = run(&s)
                .ok()
                .and_then(|o| o.failure.map(|f| (f, o.notes)))
                .filter(|(f, _)| f.signature == found.signature);
            match hit {
                Some((f, notes)) => {
                    cur = s.items[..(f.item + 1).min(s.items.len())].to_vec();
                    best = Some(Shrunk {
                        seq: RSequence {
                            items: cur.clone(),
                            ..s
                        },
                        failure: f,
                        notes,
                        runs,
                    });
                    removed = true;
                }
                None => start = end,
            }
        }
        if runs >= max_runs || (chunk == 1 && !removed) {
            break;
        }
        chunk = chunk.div_ceil(2).max(1);
    }
    if let Some(b) = best.as_mut() {
        b.runs = runs;
    }
    best
}
