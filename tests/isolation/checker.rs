//! Checking a recorded history with `adya`, and what each level must not
//! show.
//!
//! Every history is checked once against `serializable`, which makes adya
//! report every anomaly it can find (G0 … G2-item, lost update, internal
//! inconsistencies); each level's assertion then filters that list through
//! [`forbidden`]. Anomalies a level permits (G2-item everywhere; G-single,
//! lost update and non-repeatable reads at RC) are reported, not asserted.
//!
//! Histories with pipelined lone commands are checked with process order
//! as well ([`check_run`] with `session`): a client's operations, in the
//! order it issued them, against `strong-session-serializable`; then
//! [`forbidden_in_session`] adds the process variants of what the level
//! forbids, and [`lone_only_cycles`] flags any cycle made of lone commands
//! alone, whatever its kind.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use adya::{check, History, Opts, Report, Valid};

use crate::client::Level;
use crate::workload::Workload;

/// Malformed-history verdicts adya only reports when asked to; asking makes
/// a broken harness fail loudly instead of passing an unchecked history.
const MALFORMED: [&str; 3] = [
    "duplicate-appends",
    "duplicate-writes",
    "unexpected-txn-micro-op-types",
];

/// Verdicts that mean "could not decide": never a pass.
const INCONCLUSIVE: [&str; 2] = ["cycle-search-timeout", "empty-transaction-graph"];

/// Budget for adya's cycle search per strongly connected component.
const SEARCH_BUDGET: Duration = Duration::from_secs(20);

/// Anomaly types that must not appear at `level`: G0 and G1a/b/c everywhere,
/// with everything adya says implies them (`incompatible-order` and
/// `dirty-update` ⇒ G1a, `future-read` ⇒ G1c…); above RC also `internal`
/// (a re-read that changed), lost update and G-single (read skew); and
/// always a malformed history or an inconclusive search.
///
/// `orders_trusted = false` is for list-append histories with lost appends:
/// Elle's inference assumes an append is never overwritten, so with lost
/// appends the version orders it derives — and the G0/G1c/`incompatible-order`
/// built on them — say nothing about the store. Then only what a single read
/// shows directly is held against it: an aborted (G1a) or intermediate (G1b)
/// read, or duplicated elements.
pub fn forbidden(level: Level, orders_trusted: bool) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = if orders_trusted {
        let mut base = vec![
            "G0",
            "G1a",
            "G1b",
            "G1c",
            "duplicate-elements",
            "cyclic-versions",
            // Cycles adya proved exist without naming one.
            "PL-1-cycle-exists",
            "PL-2-cycle-exists",
        ];
        if level != Level::Rc {
            // RC may read a key twice and see two values; adya calls that
            // `internal`. Reading one's own writes is checked by the harness.
            base.extend(["internal", "lost-update", "G-single"]);
        }
        adya::model::implying(&base)
    } else {
        ["G1a", "G1b", "dirty-update", "duplicate-elements"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    out.extend(MALFORMED.iter().chain(&INCONCLUSIVE).map(|s| s.to_string()));
    out
}

/// [`forbidden`], plus its cycle anomalies with process order in them
/// (`G0-process`, `G1c-process`, above RC `G-single-process`…): for
/// histories checked with process order.
pub fn forbidden_in_session(level: Level, orders_trusted: bool) -> BTreeSet<String> {
    let mut out = forbidden(level, orders_trusted);
    if orders_trusted {
        let mut base = vec![
            "G0-process",
            "G1c-process",
            "strong-session-PL-1-cycle-exists",
            "strong-session-PL-2-cycle-exists",
        ];
        if level != Level::Rc {
            base.push("G-single-process");
        }
        out.extend(adya::model::implying(&base));
    }
    out
}

/// Cycles adya reported whose every transaction is a lone command (by
/// completion index): lone commands each take effect at one moment, in
/// their client's order, so any such cycle — write skew shapes included —
/// means a pipeline did not behave as its commands run one at a time.
pub fn lone_only_cycles(report: &Report, lone: &HashSet<u64>) -> Vec<String> {
    report
        .anomalies
        .iter()
        .filter(|(kind, _)| kind.starts_with('G'))
        .flat_map(|(kind, list)| list.iter().map(move |a| (kind, a)))
        .filter(|(_, a)| !a.ops.is_empty() && a.ops.iter().all(|i| lone.contains(i)))
        .map(|(kind, a)| {
            format!(
                "--- {kind} among lone commands only (ops {:?})\n{}",
                a.ops,
                a.explanation.trim_end()
            )
        })
        .collect()
}

/// How [`check_run`] checks a history.
#[derive(Clone, Debug, Default)]
pub struct Checks {
    /// Add process order: `strong-session-serializable` instead of
    /// `serializable`.
    pub session: bool,
    /// Also check `strict-serializable` (real-time order), for the
    /// write-up; off when the history's real-time order is not honest.
    pub strict: bool,
    /// rw-register: Elsa's commit timestamps as the version order (only
    /// when every committed transaction has one).
    pub commit_ts: Option<HashMap<u64, i64>>,
}

/// What adya found in one history, by [`check_run`].
pub struct CheckedRun {
    /// Every anomaly type adya can name (with process order if asked).
    pub all: Report,
    pub strict: Option<Report>,
    pub by_commit_ts: Option<Report>,
}

/// Parses and checks `history` as `checks` says.
pub fn check_run(history: &str, workload: Workload, checks: Checks) -> CheckedRun {
    let h = History::from_json(history)
        .unwrap_or_else(|e| panic!("adya cannot parse our history: {e}"));
    let model = if checks.session {
        "strong-session-serializable"
    } else {
        "serializable"
    };
    let all = check(&h, workload.adya(), &opts(model, workload));
    let strict = checks
        .strict
        .then(|| check(&h, workload.adya(), &opts("strict-serializable", workload)));
    let by_commit_ts = match (workload, checks.commit_ts) {
        (w, Some(order)) if w.registers() => Some(check(
            &h,
            workload.adya(),
            &Opts {
                transaction_order: Some(order),
                ..opts("serializable", workload)
            },
        )),
        _ => None,
    };
    CheckedRun {
        all,
        strict,
        by_commit_ts,
    }
}

/// What adya found in one history, by [`check_history`] (the form
/// `tests/cluster/spread.rs` reads; the fields it alone reads are allowed
/// to go unread here).
#[allow(dead_code)]
pub struct Checked {
    /// Checked against `serializable`: every anomaly type adya can name.
    pub all: Report,
    /// Checked against `strict-serializable` (adds real-time order): for the
    /// write-up only.
    pub strict: Report,
    /// rw-register only: checked again with Elsa's commit timestamps as the
    /// version order of every key (a white-box check of the timestamps).
    pub by_commit_ts: Option<Report>,
}

fn opts(model: &str, workload: Workload) -> Opts {
    Opts {
        models: vec![model.into()],
        anomalies: MALFORMED.iter().map(|s| s.to_string()).collect(),
        timeout: SEARCH_BUDGET,
        // A transaction that read x = 1 and then wrote x = 2 installed 2
        // after 1: true of any store whose writes are buffered until commit.
        wfr_keys: workload.registers(),
        ..Opts::default()
    }
}

/// Parses and checks `history`. `commit_ts` maps completion indices of
/// committed transactions to their commit timestamps, when known for all.
/// ([`check_run`] with real time and without process order.)
pub fn check_history(
    history: &str,
    workload: Workload,
    commit_ts: Option<HashMap<u64, i64>>,
) -> Checked {
    let run = check_run(
        history,
        workload,
        Checks {
            session: false,
            strict: true,
            commit_ts,
        },
    );
    Checked {
        all: run.all,
        strict: run.strict.expect("asked for"),
        by_commit_ts: run.by_commit_ts,
    }
}

/// The anomaly types in `report` that `level` forbids (see [`forbidden`]).
pub fn violations(report: &Report, level: Level, orders_trusted: bool) -> Vec<String> {
    violations_of(report, &forbidden(level, orders_trusted))
}

/// The anomaly types in `report` that are in `forbidden`, or
/// `unknown-verdict` if adya could not decide.
pub fn violations_of(report: &Report, forbidden: &BTreeSet<String>) -> Vec<String> {
    let mut out: Vec<String> = report
        .anomaly_types
        .iter()
        .filter(|t| forbidden.contains(*t))
        .cloned()
        .collect();
    if out.is_empty() && report.valid == Valid::Unknown {
        out.push("unknown-verdict".into());
    }
    out
}

/// `type(count)` for every anomaly type in `report`, or `none`.
pub fn summary(report: &Report) -> String {
    if report.anomalies.is_empty() {
        return "none".into();
    }
    report
        .anomalies
        .iter()
        .map(|(kind, list)| format!("{kind}({})", list.len()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// adya's proofs for the first few anomalies of each of `types`.
pub fn explain(report: &Report, types: &[String]) -> String {
    let mut out = String::new();
    for t in types {
        for a in report.anomalies.get(t).into_iter().flatten().take(3) {
            out.push_str(&format!(
                "--- {t} (ops {:?})\n{}\n",
                a.ops,
                a.explanation.trim_end()
            ));
        }
    }
    out
}
