//! A strict reader of the OpenMetrics text format (what `/metrics`
//! answers), for the tests: every line must parse, every sample must
//! belong to a family declared before it with a suffix its type allows,
//! labels are quoted and escaped, histogram buckets are cumulative and end
//! at `+Inf` = `_count`, and the text ends with `# EOF`.
//!
//! Written here because the maintained Rust parser (`prometheus-parse`)
//! reads only the older Prometheus text format: it does not match
//! OpenMetrics counters' `_total` samples to their `# TYPE`, and drops
//! histogram buckets; a test that checks the format must not be laxer
//! than a Prometheus server.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A `# TYPE` and its samples.
#[derive(Debug, Clone)]
pub struct Family {
    pub kind: String,
    pub help: String,
    pub samples: Vec<Sample>,
}

/// A parsed exposition: families by name.
#[derive(Debug)]
pub struct Exposition {
    pub families: BTreeMap<String, Family>,
}

fn suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "histogram" => &["_bucket", "_sum", "_count", "_created"],
        "summary" => &["", "_sum", "_count", "_created"],
        "info" => &["_info"],
        "gauge" | "unknown" | "stateset" => &[""],
        _ => &[],
    }
}

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse().map_err(|_| format!("bad value {s:?}")),
    }
}

/// `{a="x",b="y"}` (the braces already stripped) → labels.
fn parse_labels(mut s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    while !s.is_empty() {
        let eq = s.find('=').ok_or(format!("label without '=': {s:?}"))?;
        let key = &s[..eq];
        if !valid_name(key) {
            return Err(format!("bad label name {key:?}"));
        }
        let rest = s[eq + 1..]
            .strip_prefix('"')
            .ok_or(format!("label {key} not quoted"))?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => return Err(format!("bad escape in label {key}: {other:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated label {key}")),
            }
        };
        if out.insert(key.to_string(), value).is_some() {
            return Err(format!("label {key} twice"));
        }
        s = &rest[end + 1..];
        s = match s.strip_prefix(',') {
            Some(more) if !more.is_empty() => more,
            Some(_) => return Err("trailing comma in labels".into()),
            None if s.is_empty() => s,
            None => return Err(format!("junk after label {key}: {s:?}")),
        };
    }
    Ok(out)
}

impl Exposition {
    /// Parses `text`, or says which line is wrong and why.
    pub fn parse(text: &str) -> Result<Exposition, String> {
        let mut families: BTreeMap<String, Family> = BTreeMap::new();
        let mut current: Option<String> = None;
        let mut helps: BTreeMap<String, String> = BTreeMap::new();
        let mut eof = false;
        for (n, line) in text.lines().enumerate() {
            let err = |e: String| format!("line {}: {e}: {line:?}", n + 1);
            if eof {
                return Err(err("text after # EOF".into()));
            }
            if line == "# EOF" {
                eof = true;
                continue;
            }
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let (what, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let arg = parts.next().unwrap_or("");
                if !valid_name(name) {
                    return Err(err("bad family name".into()));
                }
                match what {
                    "HELP" => {
                        helps.insert(name.to_string(), arg.to_string());
                    }
                    "TYPE" => {
                        if suffixes(arg).is_empty() {
                            return Err(err(format!("unknown type {arg:?}")));
                        }
                        if families.contains_key(name) {
                            return Err(err("family declared twice".into()));
                        }
                        families.insert(
                            name.to_string(),
                            Family {
                                kind: arg.to_string(),
                                help: helps.get(name).cloned().unwrap_or_default(),
                                samples: Vec::new(),
                            },
                        );
                        current = Some(name.to_string());
                    }
                    "UNIT" => {}
                    _ => return Err(err("unknown comment".into())),
                }
                continue;
            }
            if line.is_empty() {
                return Err(err("empty line".into()));
            }
            let (name_labels, value) = match line.rfind('}') {
                Some(close) => (&line[..=close], line[close + 1..].trim_start()),
                None => line.split_once(' ').ok_or(err("no value".into()))?,
            };
            let value = value.split(' ').next().unwrap_or("");
            let (name, labels) = match name_labels.split_once('{') {
                Some((name, l)) => (name, parse_labels(&l[..l.len() - 1]).map_err(err)?),
                None => (name_labels, BTreeMap::new()),
            };
            if !valid_name(name) {
                return Err(err("bad sample name".into()));
            }
            let family = current
                .as_ref()
                .ok_or(err("sample before any # TYPE".into()))?;
            let f = families.get_mut(family).expect("declared");
            let suffix = name
                .strip_prefix(family.as_str())
                .ok_or(err(format!("sample outside its family {family}")))?;
            if !suffixes(&f.kind).contains(&suffix) {
                return Err(err(format!(
                    "suffix {suffix:?} not allowed for a {}",
                    f.kind
                )));
            }
            f.samples.push(Sample {
                name: name.to_string(),
                labels,
                value: parse_value(value).map_err(err)?,
            });
        }
        if !eof {
            return Err("no # EOF at the end".into());
        }
        let e = Exposition { families };
        e.check_histograms()?;
        Ok(e)
    }

    fn check_histograms(&self) -> Result<(), String> {
        for (name, f) in self.families.iter().filter(|(_, f)| f.kind == "histogram") {
            // Labels but `le` → (le, cumulative count) per bucket.
            type Series = BTreeMap<Vec<(String, String)>, Vec<(f64, f64)>>;
            let mut series = Series::new();
            for s in f.samples.iter().filter(|s| s.name.ends_with("_bucket")) {
                let le = s
                    .labels
                    .get("le")
                    .ok_or(format!("{name}: bucket without le"))?;
                let mut rest: Vec<(String, String)> = s.labels.clone().into_iter().collect();
                rest.retain(|(k, _)| k != "le");
                series
                    .entry(rest)
                    .or_default()
                    .push((parse_value(le)?, s.value));
            }
            for (labels, buckets) in series {
                let mut last = (f64::NEG_INFINITY, 0.0);
                for &(le, n) in &buckets {
                    if le <= last.0 || n < last.1 {
                        return Err(format!("{name}{labels:?}: buckets not cumulative"));
                    }
                    last = (le, n);
                }
                if last.0 != f64::INFINITY {
                    return Err(format!("{name}{labels:?}: no +Inf bucket"));
                }
                let count = self
                    .value(&format!("{name}_count"), &pairs(&labels))
                    .ok_or(format!("{name}{labels:?}: no _count"))?;
                if count != last.1 {
                    return Err(format!(
                        "{name}{labels:?}: +Inf bucket {} != count {count}",
                        last.1
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every sample named `name` (a full sample name: `x_total`, `x_bucket`).
    pub fn samples(&self, name: &str) -> Vec<&Sample> {
        self.families
            .values()
            .flat_map(|f| &f.samples)
            .filter(|s| s.name == name)
            .collect()
    }

    /// The value of the sample `name` with exactly these labels.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples(name)
            .into_iter()
            .find(|s| {
                s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }

    /// The sum of every sample named `name`.
    pub fn sum(&self, name: &str) -> f64 {
        self.samples(name).iter().map(|s| s.value).sum()
    }
}

fn pairs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// `GET http://127.0.0.1:port{path}`: (status, content type, body).
pub fn http_get(port: u16, path: &str) -> (u16, String, String) {
    let url = format!("http://127.0.0.1:{port}{path}");
    let resp = match ureq::get(&url).call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {url}: {e}"),
    };
    let status = resp.status();
    let ctype = resp.header("content-type").unwrap_or("").to_string();
    (status, ctype, resp.into_string().expect("body"))
}

/// Scrapes `/metrics` on `port` and parses it strictly.
pub fn scrape(port: u16) -> Exposition {
    let (status, ctype, body) = http_get(port, "/metrics");
    assert_eq!(status, 200, "GET /metrics: {body}");
    assert!(
        ctype.starts_with("application/openmetrics-text"),
        "content type {ctype}"
    );
    Exposition::parse(&body).unwrap_or_else(|e| panic!("/metrics does not parse: {e}\n{body}"))
}
