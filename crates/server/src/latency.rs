//! The latency monitor (LATENCY LATEST|HISTORY|RESET|DOCTOR, Redis 7.0's
//! `latency.c`): per event, the last 160 seconds that had a spike of at
//! least `latency-monitor-threshold` ms (the worst per second) and the
//! worst ever. Events: `command` and `fast-command` (commands with the
//! `fast` flag), as Redis.
//!
//! One node-wide map behind a mutex, taken only for a spike over the
//! threshold (0, the default, turns the monitor off): the per-command cost
//! is one relaxed load.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Samples kept per event (Redis's `LATENCY_TS_LEN`).
const TS_LEN: usize = 160;

#[derive(Clone, Debug, Default)]
pub struct Series {
    /// `(unix seconds, ms)`, oldest first; one per second.
    pub samples: std::collections::VecDeque<(u64, u64)>,
    pub max: u64,
}

/// The monitor and its threshold (ms; CONFIG SET changes it at once).
#[derive(Default)]
pub struct Latency {
    pub threshold_ms: AtomicU64,
    events: Mutex<BTreeMap<String, Series>>,
}

impl Latency {
    pub fn new(threshold_ms: u64) -> Latency {
        Latency {
            threshold_ms: AtomicU64::new(threshold_ms),
            events: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records `ms` for `event` if the monitor is on and it is a spike
    /// (Redis's `latencyAddSampleIfNeeded`).
    #[inline]
    pub fn sample_if_needed(&self, event: &str, ms: u64) {
        let t = self.threshold_ms.load(Relaxed);
        if t != 0 && ms >= t {
            self.add(event, ms, unix_now());
        }
    }

    fn add(&self, event: &str, ms: u64, now: u64) {
        let Ok(mut events) = self.events.lock() else {
            return;
        };
        let s = events.entry(event.to_string()).or_default();
        s.max = s.max.max(ms);
        match s.samples.back_mut() {
            Some((t, v)) if *t == now => *v = (*v).max(ms),
            _ => {
                s.samples.push_back((now, ms));
                if s.samples.len() > TS_LEN {
                    s.samples.pop_front();
                }
            }
        }
    }

    /// Every event: name, time and ms of its latest spike, worst ever.
    pub fn latest(&self) -> Vec<(String, u64, u64, u64)> {
        let events = self.events.lock().map(|e| e.clone()).unwrap_or_default();
        events
            .into_iter()
            .filter_map(|(name, s)| {
                let (t, v) = *s.samples.back()?;
                Some((name, t, v, s.max))
            })
            .collect()
    }

    /// One event's samples, oldest first (empty when it has none).
    pub fn history(&self, event: &[u8]) -> Vec<(u64, u64)> {
        let events = self.events.lock();
        events
            .ok()
            .and_then(|e| {
                let name = std::str::from_utf8(event).ok()?;
                Some(e.get(name)?.samples.iter().copied().collect())
            })
            .unwrap_or_default()
    }

    /// LATENCY GRAPH: `event`'s samples drawn as Redis's `latency.c` and
    /// `sparkline.c` draw them (a title, 80 dashes, four rows of `_o#|`
    /// and each sample's age below it); None when it has no samples.
    pub fn graph(&self, event: &[u8]) -> Option<String> {
        let events = self.events.lock().ok()?;
        let name = std::str::from_utf8(event).ok()?;
        let s = events.get(name)?;
        Some(sparkline(name, s, unix_now()))
    }

    /// Forgets the named events (all with an empty list); how many there were.
    pub fn reset(&self, names: &[bytes::Bytes]) -> usize {
        let Ok(mut events) = self.events.lock() else {
            return 0;
        };
        if names.is_empty() {
            let n = events.len();
            events.clear();
            return n;
        }
        let mut n = 0;
        for name in names {
            let key = events
                .keys()
                .find(|k| k.as_bytes().eq_ignore_ascii_case(name))
                .cloned();
            if let Some(k) = key {
                events.remove(&k);
                n += 1;
            }
        }
        n
    }

    /// LATENCY DOCTOR's report: Redis's words where Elsa's situation is
    /// Redis's (monitor off, no spikes, spikes per event with their
    /// average, mean deviation and period), then advice that applies.
    pub fn doctor(&self, slowlog_slower_than_us: i64) -> String {
        let events = self.events.lock().map(|e| e.clone()).unwrap_or_default();
        let threshold = self.threshold_ms.load(Relaxed);
        if events.is_empty() && threshold == 0 {
            return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".into();
        }
        if events.is_empty() {
            return "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n".into();
        }
        let mut r = String::from("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n");
        let mut commands = false;
        for (i, (name, s)) in events.iter().enumerate() {
            let n = s.samples.len().max(1) as u64;
            let avg = s.samples.iter().map(|(_, v)| v).sum::<u64>() / n;
            let mad = s.samples.iter().map(|(_, v)| v.abs_diff(avg)).sum::<u64>() / n;
            let period = match (s.samples.front(), s.samples.back()) {
                (Some((a, _)), Some((b, _))) => (b - a) as f64 / n as f64,
                _ => 0.0,
            };
            r.push_str(&format!(
                "{}. {}: {} latency spikes (average {}ms, mean deviation {}ms, period {:.2} sec). Worst all time event {}ms.\n",
                i + 1,
                name,
                s.samples.len(),
                avg,
                mad,
                period,
                s.max
            ));
            commands |= name == "command" || name == "fast-command";
        }
        r.push_str("\nI have a few advices for you:\n\n");
        if commands {
            if slowlog_slower_than_us < 0 {
                r.push_str(&format!("- There are latency issues with potentially slow commands you are using. Try to enable the Slow Log Redis feature using the command 'CONFIG SET slowlog-log-slower-than {}'. If the Slow log is disabled Redis is not able to log slow commands execution for you.\n", threshold * 1000));
            } else if slowlog_slower_than_us as u64 / 1000 > threshold {
                r.push_str(&format!("- Your current Slow Log configuration only logs events that are slower than your configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {}'.\n", threshold * 1000));
            }
            r.push_str("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n");
        }
        r
    }
}

/// Redis's `LATENCY_GRAPH_COLS`.
const GRAPH_COLS: usize = 80;
/// Redis's rows of a sparkline.
const GRAPH_ROWS: usize = 4;

/// The graph of `s` for `event` at `now` (unix seconds): Redis's
/// `latencyCommandGenSparkeline` with `sparklineRender(…, SPARKLINE_FILL)`.
fn sparkline(event: &str, s: &Series, now: u64) -> String {
    let samples: Vec<(u64, String)> = s
        .samples
        .iter()
        .map(|&(t, ms)| {
            let ago = now.saturating_sub(t);
            let label = match ago {
                0..=59 => format!("{ago}s"),
                60..=3599 => format!("{}m", ago / 60),
                3600..=86_399 => format!("{}h", ago / 3600),
                _ => format!("{}d", ago / 86_400),
            };
            (ms, label)
        })
        .collect();
    let min = samples.iter().map(|(v, _)| *v).min().unwrap_or(0);
    let max = samples.iter().map(|(v, _)| *v).max().unwrap_or(0);
    let mut out = format!(
        "{event} - high {max} ms, low {min} ms (all time high {} ms)\n",
        s.max
    );
    out.push_str(&"-".repeat(GRAPH_COLS));
    out.push('\n');
    for (n, chunk) in samples.chunks(GRAPH_COLS).enumerate() {
        if n != 0 {
            out.push('\n');
        }
        render_range(&mut out, chunk, min as f64, max as f64);
    }
    out
}

/// Redis's `sparklineRenderRange` with the fill option: rows of `_o#`
/// (and `|` below the top), then the labels one character per row, each
/// row as long as the range.
fn render_range(out: &mut String, samples: &[(u64, String)], min: f64, max: f64) {
    const FILL: &[u8] = b"_o#";
    let steps = (FILL.len() * GRAPH_ROWS) as i64;
    let relmax = if max - min == 0.0 { 1.0 } else { max - min };
    let mut row = 0usize;
    loop {
        let mut chars = vec![b' '; samples.len()];
        let mut more = false;
        for (j, (v, label)) in samples.iter().enumerate() {
            let relval = *v as f64 - min;
            // `step = (int) (relval*steps)/relmax;` — the cast binds first.
            let step = ((((relval * steps as f64) as i64) as f64) / relmax) as i64;
            let step = step.clamp(0, steps - 1);
            if row < GRAPH_ROWS {
                more = true;
                let idx = step - ((GRAPH_ROWS - row - 1) * FILL.len()) as i64;
                if (0..FILL.len() as i64).contains(&idx) {
                    chars[j] = FILL[idx as usize];
                } else if idx >= FILL.len() as i64 {
                    chars[j] = b'|';
                }
            } else {
                // One blank row between the graph and the labels.
                if row - GRAPH_ROWS < 1 {
                    more = true;
                    break;
                }
                let at = row - GRAPH_ROWS - 1;
                if let Some(&c) = label.as_bytes().get(at) {
                    more = true;
                    chars[j] = c;
                }
            }
        }
        if !more {
            break;
        }
        row += 1;
        out.push_str(&String::from_utf8_lossy(&chars));
        out.push('\n');
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// LATENCY HELP's lines (Redis 7.0's).
pub const HELP: &[&str] = &[
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
];

/// LATENCY HISTOGRAM's buckets from a command's cumulative histogram:
/// powers of two in µs with the calls under each, where the count grows
/// (Redis's `fillCommandCDF`: a log iterator from 1 µs, base 2).
pub fn power_of_two_cdf(buckets: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut prev = 0;
    let mut bound = 1u64;
    let Some(&(_, total)) = buckets.last() else {
        return out;
    };
    while prev < total {
        // Calls that took at most `bound - 1` µs (at most 1 µs for the
        // first bucket, where Redis counts everything under 1 µs too).
        let limit = if bound == 1 { 1 } else { bound - 1 };
        let n = buckets
            .iter()
            .take_while(|(le, _)| *le <= limit)
            .last()
            .map_or(0, |b| b.1);
        if n > prev {
            out.push((bound, n));
            prev = n;
        }
        if bound >= 1 << 40 {
            if prev < total {
                out.push((bound * 2, total));
            }
            break;
        }
        bound *= 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_per_second_worst_kept() {
        let l = Latency::new(1);
        l.add("command", 5, 100);
        l.add("command", 9, 100);
        l.add("command", 3, 100);
        l.add("command", 2, 101);
        l.add("fast-command", 1, 101);
        assert_eq!(l.history(b"command"), vec![(100, 9), (101, 2)]);
        let latest = l.latest();
        assert_eq!(latest[0], ("command".to_string(), 101, 2, 9));
        for t in 0..200 {
            l.add("command", 1, 1000 + t);
        }
        assert_eq!(l.history(b"command").len(), TS_LEN);
        assert_eq!(l.reset(&[bytes::Bytes::from("COMMAND")]), 1);
        assert_eq!(l.reset(&[]), 1);
        assert!(l.latest().is_empty());
    }

    #[test]
    fn graph_draws_as_redis_does() {
        // Steps of 5, 15, 35, 0 ms over 35 ms in 12: 1, 5, 11 (capped), 0;
        // ages 100, 99, 70 and 10 s: 1m, 1m, 1m, 10s.
        let s = Series {
            samples: [(100, 10), (101, 20), (130, 40), (190, 5)].into(),
            max: 40,
        };
        let g = sparkline("command", &s, 200);
        let want = format!(
            "command - high 40 ms, low 5 ms (all time high 40 ms)\n{}\n  # \n  | \n #| \no||_\n    \n1111\nmmm0\n   s\n",
            "-".repeat(80)
        );
        assert_eq!(g, want);
    }

    #[test]
    fn threshold_zero_is_off() {
        let l = Latency::new(0);
        l.sample_if_needed("command", 1000);
        assert!(l.latest().is_empty());
        l.threshold_ms.store(10, Relaxed);
        l.sample_if_needed("command", 9);
        assert!(l.latest().is_empty());
        l.sample_if_needed("command", 10);
        assert_eq!(l.latest().len(), 1);
    }

    #[test]
    fn cdf_in_powers_of_two() {
        // 10 calls at ≤1 µs, 5 more ≤ 3 µs, 5 more ≤ 100 µs.
        let b = vec![(1, 10), (3, 15), (99, 15), (103, 20)];
        assert_eq!(power_of_two_cdf(&b), vec![(1, 10), (4, 15), (128, 20)]);
    }
}
