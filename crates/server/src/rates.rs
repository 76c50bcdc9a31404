//! Rates INFO shows (`instantaneous_ops_per_sec`,
//! `instantaneous_input_kbps`, `instantaneous_output_kbps`), sampled as
//! Redis samples them (`trackInstantaneousMetric`): every 100 ms the
//! counters' growth per second, averaged over the last 16 samples.
//!
//! The sampler is one small thread per node (`elsa-rates`) rather than a
//! task on a worker: a worker busy with clients would sample late, and a
//! thread costs nothing per command. It ends when the node does.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Weak;
use std::time::{Duration, Instant};

/// Samples averaged (Redis's `STATS_METRIC_SAMPLES`).
const SAMPLES: usize = 16;
/// Between samples (Redis samples in `serverCron`, every 100 ms).
const PERIOD: Duration = Duration::from_millis(100);

/// The sampled rates (f64 bits).
#[derive(Default)]
pub struct Rates {
    ops_per_sec: AtomicU64,
    input_kbps: AtomicU64,
    output_kbps: AtomicU64,
}

impl Rates {
    /// Commands per second.
    pub fn ops_per_sec(&self) -> u64 {
        f64::from_bits(self.ops_per_sec.load(Relaxed)).round() as u64
    }
    /// KB read from clients per second.
    pub fn input_kbps(&self) -> f64 {
        f64::from_bits(self.input_kbps.load(Relaxed))
    }
    /// KB written to clients per second.
    pub fn output_kbps(&self) -> f64 {
        f64::from_bits(self.output_kbps.load(Relaxed))
    }
}

/// One metric's last samples (per second).
struct Metric {
    last: u64,
    samples: [f64; SAMPLES],
    at: usize,
}

impl Metric {
    fn new(now: u64) -> Metric {
        Metric {
            last: now,
            samples: [0.0; SAMPLES],
            at: 0,
        }
    }

    /// Takes a sample of the counter at `now` after `secs`; the mean.
    fn sample(&mut self, now: u64, secs: f64) -> f64 {
        let per_sec = now.saturating_sub(self.last) as f64 / secs;
        self.last = now;
        self.samples[self.at] = per_sec;
        self.at = (self.at + 1) % SAMPLES;
        self.samples.iter().sum::<f64>() / SAMPLES as f64
    }
}

/// The counters the rates are sampled from: commands processed, and bytes
/// read and written.
pub struct Counters {
    pub commands: u64,
    pub input: u64,
    pub output: u64,
}

/// Starts the sampler of a node's rates: `read` gives the rates to set and
/// the counters now, until the state is gone.
pub fn start_sampler<S: Send + Sync + 'static>(state: Weak<S>, read: fn(&S) -> (&Rates, Counters)) {
    let _ = std::thread::Builder::new()
        .name("elsa-rates".into())
        .spawn(move || {
            let (mut ops, mut input, mut output) = match state.upgrade() {
                Some(s) => {
                    let (_, c) = read(&s);
                    (
                        Metric::new(c.commands),
                        Metric::new(c.input),
                        Metric::new(c.output),
                    )
                }
                None => return,
            };
            let mut last = Instant::now();
            loop {
                std::thread::sleep(PERIOD);
                let Some(s) = state.upgrade() else {
                    return;
                };
                let secs = last.elapsed().as_secs_f64().max(1e-3);
                last = Instant::now();
                let (rates, c) = read(&s);
                let o = ops.sample(c.commands, secs);
                let i = input.sample(c.input, secs) / 1024.0;
                let w = output.sample(c.output, secs) / 1024.0;
                rates.ops_per_sec.store(o.to_bits(), Relaxed);
                rates.input_kbps.store(i.to_bits(), Relaxed);
                rates.output_kbps.store(w.to_bits(), Relaxed);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_of_the_last_samples() {
        let mut m = Metric::new(0);
        for i in 1..=SAMPLES as u64 {
            m.sample(i * 10, 0.1);
        }
        // 10 per 0.1 s = 100 per second, every sample.
        assert!((m.sample(170, 0.1) - 100.0).abs() < 1e-9);
    }
}
