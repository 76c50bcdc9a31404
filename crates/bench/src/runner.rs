//! The load driver shared by every workload: one OS thread and one
//! connection per client, a start barrier, warm-up, an operation budget or a
//! duration, an optional target rate with coordinated-omission correction,
//! and the live progress bar.
//!
//! A workload supplies a [`Worker`] per thread; the driver times each step,
//! so every workload's latencies are measured the same way.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::measure::Recorder;
use crate::BenchError;

/// How much load, from how many clients, at what pace.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Client threads, one connection each.
    pub threads: usize,
    /// Total steps over all threads (split evenly), if count-bound.
    pub steps: Option<u64>,
    /// Stop after this long, if time-bound (whichever comes first).
    pub duration: Option<Duration>,
    /// Run unmeasured for this long first.
    pub warmup: Duration,
    /// Steps per second over all threads; `None` = as fast as possible.
    pub target_rate: Option<f64>,
    /// Shown next to the progress bar.
    pub label: String,
}

/// One step's result, as the driver records it.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    /// Histogram name for the step's latency (`READ`, `TXN`, `BATCH`...).
    pub op: &'static str,
    /// False records `Return=ERROR` instead of a latency.
    pub ok: bool,
    /// Operations the step counts for in the throughput (1 for a YCSB
    /// operation, the committed KV operations of a transaction or batch).
    pub units: u64,
}

/// What a worker did on one call.
pub enum StepResult {
    /// A step was done.
    Done(Step),
    /// Nothing left to do (a load phase ran out of records).
    Exhausted,
}

/// A client thread's workload: its connection, RNG and generators.
pub trait Worker: Send {
    /// Does one step. Sub-operations may be recorded into `rec` (YCSB's
    /// read-modify-write records READ and UPDATE too); the step itself is
    /// timed and recorded by the driver. An `Err` ends the run: it means the
    /// connection is gone, not that one operation failed.
    fn step(&mut self, rec: &mut Recorder) -> Result<StepResult, BenchError>;
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// All threads' recorders, merged.
    pub rec: Recorder,
    /// From the end of warm-up to the last thread's end.
    pub runtime: Duration,
    /// Measured steps.
    pub steps: u64,
    /// Measured units (see [`Step::units`]).
    pub units: u64,
}

impl Outcome {
    /// `n` events over the measured runtime, per second (whole
    /// milliseconds, as YCSB computes its throughput; 0 for an empty run).
    pub fn per_sec(&self, n: u64) -> f64 {
        let ms = self.runtime.as_millis() as u64;
        if ms > 0 {
            n as f64 * 1000.0 / ms as f64
        } else {
            0.0
        }
    }
}

/// The `INTENDED-` histogram name for an operation (YCSB's naming when it
/// reports coordinated-omission-corrected latencies).
fn intended(op: &'static str) -> &'static str {
    match op {
        "READ" => "INTENDED-READ",
        "UPDATE" => "INTENDED-UPDATE",
        "INSERT" => "INTENDED-INSERT",
        "SCAN" => "INTENDED-SCAN",
        "READ-MODIFY-WRITE" => "INTENDED-READ-MODIFY-WRITE",
        "TXN" => "INTENDED-TXN",
        "BATCH" => "INTENDED-BATCH",
        "UPSERT" => "INTENDED-UPSERT",
        _ => "INTENDED-OTHER",
    }
}

/// Runs `plan` with one worker per thread, built by `make(thread_index)`
/// inside its thread (so connections are opened in parallel, before the
/// start barrier).
pub fn drive<W, F>(plan: &Plan, make: F) -> Result<Outcome, BenchError>
where
    W: Worker,
    F: Fn(usize) -> Result<W, BenchError> + Sync,
{
    let threads = plan.threads.max(1);
    // A start gate rather than a Barrier: a thread that cannot be spawned
    // must not leave the others waiting forever.
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let done_steps = AtomicU64::new(0);
    let done_units = AtomicU64::new(0);
    let stop = AtomicBool::new(false);

    let bar = progress_bar(plan);
    let results = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let (ready, go, make, stop) = (&ready, &go, &make, &stop);
            let (done_steps, done_units) = (&done_steps, &done_units);
            let budget = plan
                .steps
                .map(|s| s / threads as u64 + u64::from((i as u64) < s % threads as u64));
            let spawned = std::thread::Builder::new()
                .name(format!("bench-{i}"))
                .spawn_scoped(scope, move || {
                    let worker = make(i);
                    ready.fetch_add(1, Ordering::SeqCst);
                    while !go.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    let start = Instant::now();
                    let result = match worker {
                        Ok(mut w) => client_loop(
                            &mut w, plan, threads, budget, start, stop, done_steps, done_units,
                        ),
                        Err(e) => Err(e),
                    };
                    if result.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    result
                });
            match spawned {
                Ok(h) => handles.push(Ok(h)),
                Err(e) => {
                    handles.push(Err(BenchError::Config(format!(
                        "cannot start client thread {i}: {e}"
                    ))));
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        let spawned = handles.iter().filter(|h| h.is_ok()).count();
        while ready.load(Ordering::SeqCst) < spawned {
            std::thread::sleep(Duration::from_millis(1));
        }
        go.store(true, Ordering::SeqCst);
        let start = Instant::now();
        while handles
            .iter()
            .any(|h| h.as_ref().is_ok_and(|h| !h.is_finished()))
        {
            std::thread::sleep(Duration::from_millis(100));
            update_bar(
                &bar,
                plan,
                start,
                done_steps.load(Ordering::Relaxed),
                done_units.load(Ordering::Relaxed),
            );
        }
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(BenchError::Config("a client thread panicked".into()))),
                Err(e) => Err(e),
            })
            .collect::<Vec<_>>()
    });
    bar.finish_and_clear();

    let mut out = Outcome::default();
    out.rec.enabled = true;
    for r in results {
        let (rec, end, steps, units) = r?;
        out.rec.merge(&rec);
        out.runtime = out.runtime.max(end);
        out.steps += steps;
        out.units += units;
    }
    Ok(out)
}

type ThreadResult = Result<(Recorder, Duration, u64, u64), BenchError>;

#[allow(clippy::too_many_arguments)]
fn client_loop<W: Worker>(
    w: &mut W,
    plan: &Plan,
    threads: usize,
    budget: Option<u64>,
    start: Instant,
    stop: &AtomicBool,
    done_steps: &AtomicU64,
    done_units: &AtomicU64,
) -> ThreadResult {
    let mut rec = Recorder::default();
    // Warm-up: the same work, recorded nowhere.
    let measure_start = start + plan.warmup;
    while Instant::now() < measure_start && !stop.load(Ordering::Relaxed) {
        if let StepResult::Exhausted = w.step(&mut rec)? {
            break;
        }
    }
    rec = Recorder::new();
    let deadline = plan.duration.map(|d| measure_start + d);
    let interval = plan
        .target_rate
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(threads as f64 / r));
    let (mut steps, mut units) = (0u64, 0u64);
    let mut last_end = measure_start;
    loop {
        if budget.is_some_and(|b| steps >= b) || stop.load(Ordering::Relaxed) {
            break;
        }
        // With a target rate, step n is due at a fixed time; if the system
        // fell behind, the wait for a late step is latency the client would
        // have seen (coordinated-omission correction), so it is measured
        // from the due time into INTENDED-<op>.
        let due = interval.map(|iv| measure_start + iv.mul_f64(steps as f64));
        if let Some(due) = due {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let t0 = Instant::now();
        let step = match w.step(&mut rec)? {
            StepResult::Done(s) => s,
            StepResult::Exhausted => break,
        };
        let t1 = Instant::now();
        last_end = t1;
        if step.ok {
            rec.ok(step.op, (t1 - t0).as_micros() as u64);
            if let Some(due) = due {
                rec.ok(intended(step.op), (t1 - due).as_micros() as u64);
            }
            units += step.units;
            done_units.fetch_add(step.units, Ordering::Relaxed);
        } else {
            rec.error(step.op);
        }
        steps += 1;
        done_steps.fetch_add(1, Ordering::Relaxed);
    }
    Ok((
        rec,
        last_end.saturating_duration_since(measure_start),
        steps,
        units,
    ))
}

fn progress_bar(plan: &Plan) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let len = match (plan.steps, plan.duration) {
        (Some(s), _) => s,
        (None, Some(d)) => (d + plan.warmup).as_millis() as u64,
        (None, None) => 0,
    };
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(10));
    let style =
        ProgressStyle::with_template("{prefix} [{bar:30}] {msg} elapsed {elapsed} remaining {eta}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(plan.label.clone());
    bar
}

fn update_bar(bar: &ProgressBar, plan: &Plan, start: Instant, steps: u64, units: u64) {
    let elapsed = start.elapsed();
    let measured = elapsed.saturating_sub(plan.warmup);
    if elapsed < plan.warmup {
        bar.set_message("warming up");
    } else {
        let rate = units as f64 / measured.as_secs_f64().max(1e-3);
        bar.set_message(format!("{rate:.0} ops/s"));
    }
    if plan.steps.is_some() {
        bar.set_position(steps);
    } else {
        bar.set_position(elapsed.as_millis() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter {
        left: u64,
    }

    impl Worker for Counter {
        fn step(&mut self, rec: &mut Recorder) -> Result<StepResult, BenchError> {
            if self.left == 0 {
                return Ok(StepResult::Exhausted);
            }
            self.left -= 1;
            rec.ok("SUB", 1);
            Ok(StepResult::Done(Step {
                op: "READ",
                ok: !self.left.is_multiple_of(10),
                units: 2,
            }))
        }
    }

    fn plan(threads: usize, steps: Option<u64>) -> Plan {
        Plan {
            threads,
            steps,
            duration: None,
            warmup: Duration::ZERO,
            target_rate: None,
            label: "test".into(),
        }
    }

    #[test]
    fn splits_the_budget_over_threads() {
        let out = drive(&plan(3, Some(100)), |_| Ok(Counter { left: u64::MAX })).expect("run");
        assert_eq!(out.steps, 100);
        let read = &out.rec.ops["READ"];
        assert_eq!(read.operations(), 100);
        assert_eq!(out.units, 2 * read.ok);
        assert_eq!(out.rec.ops["SUB"].ok, 100);
    }

    #[test]
    fn stops_when_exhausted_and_reports_failures() {
        let out = drive(&plan(2, None), |i| {
            Ok(Counter {
                left: 10 + i as u64,
            })
        })
        .expect("run");
        assert_eq!(out.steps, 21);
        let err = drive(&plan(2, Some(10)), |i| {
            if i == 1 {
                Err(BenchError::Config("no connection".into()))
            } else {
                Ok(Counter { left: 5 })
            }
        })
        .expect_err("a failed connection fails the run");
        assert!(err.to_string().contains("no connection"));
    }

    #[test]
    fn target_rate_records_intended_latency() {
        let mut p = plan(2, Some(20));
        p.target_rate = Some(2000.0);
        let out = drive(&p, |_| Ok(Counter { left: u64::MAX })).expect("run");
        assert_eq!(out.rec.ops["INTENDED-READ"].ok, out.rec.ops["READ"].ok);
    }
}
