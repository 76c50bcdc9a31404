//! YCSB property files and `-p name=value` overrides, read as Java's
//! `Properties` reads them (so YCSB's own files load unchanged), with typed
//! getters that name the property in every error.

use std::collections::BTreeMap;
use std::path::Path;

use crate::BenchError;

/// An ordered set of YCSB properties; later `set`s override earlier ones,
/// which is how `-P file` then `-p k=v` layer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Props {
    map: BTreeMap<String, String>,
}

impl Props {
    /// No properties: every getter answers its default.
    pub fn new() -> Props {
        Props::default()
    }

    /// Reads a property file (Java `Properties` syntax).
    pub fn load_file(&mut self, path: &Path) -> Result<(), BenchError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BenchError::Config(format!("cannot read {}: {e}", path.display())))?;
        self.load_str(&text);
        Ok(())
    }

    /// Parses Java `Properties` text: `#`/`!` comments, `key=value`,
    /// `key: value` or `key value`, a trailing backslash continues the line.
    pub fn load_str(&mut self, text: &str) {
        let mut logical = String::new();
        for raw in text.lines() {
            let line = raw.trim_start();
            if logical.is_empty()
                && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
            {
                continue;
            }
            // An odd number of trailing backslashes continues the line.
            let trailing = line.chars().rev().take_while(|&c| c == '\\').count();
            if trailing % 2 == 1 {
                logical.push_str(&line[..line.len() - 1]);
                continue;
            }
            logical.push_str(line);
            let entry = std::mem::take(&mut logical);
            self.parse_entry(&entry);
        }
        if !logical.is_empty() {
            let entry = std::mem::take(&mut logical);
            self.parse_entry(&entry);
        }
    }

    fn parse_entry(&mut self, entry: &str) {
        let entry = entry.trim();
        if entry.is_empty() {
            return;
        }
        let split = entry.find(['=', ':', ' ', '\t']).unwrap_or(entry.len());
        let key = entry[..split].trim();
        let mut rest = entry[split..].trim_start();
        if rest.starts_with('=') || rest.starts_with(':') {
            rest = rest[1..].trim_start();
        }
        self.map
            .insert(key.to_string(), rest.trim_end().to_string());
    }

    /// Applies one `-p name=value` override.
    pub fn set_pair(&mut self, pair: &str) -> Result<(), BenchError> {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| BenchError::Config(format!("-p expects name=value, got {pair:?}")))?;
        let k = k.trim();
        if k.is_empty() {
            return Err(BenchError::Config(format!(
                "-p expects name=value, got {pair:?}"
            )));
        }
        self.set(k, v.trim());
        Ok(())
    }

    /// Sets one property.
    pub fn set(&mut self, key: &str, value: &str) {
        self.map.insert(key.to_string(), value.to_string());
    }

    /// The raw value, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(String::as_str)
    }

    /// A string property with a default.
    pub fn str_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.get(key).unwrap_or(default)
    }

    /// An unsigned integer property with a default.
    pub fn u64_or(&self, key: &str, default: u64) -> Result<u64, BenchError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                BenchError::Config(format!(
                    "property {key}={v:?} is not a non-negative integer"
                ))
            }),
        }
    }

    /// A floating-point property with a default.
    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64, BenchError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(x),
                _ => Err(BenchError::Config(format!(
                    "property {key}={v:?} is not a number"
                ))),
            },
        }
    }

    /// A boolean property with a default (Java's `Boolean.parseBoolean`:
    /// only "true", any case, is true).
    pub fn bool_or(&self, key: &str, default: bool) -> bool {
        match self.get(key) {
            None => default,
            Some(v) => v.eq_ignore_ascii_case("true"),
        }
    }

    /// Every property, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ycsb_workload_file() {
        let text = "# Yahoo! Cloud System Benchmark\n\
                    # Workload A: Update heavy workload\n\
                    recordcount=1000\n\
                    operationcount=1000\n\
                    workload=site.ycsb.workloads.CoreWorkload\n\
                    \n\
                    readallfields=true\n\
                    ! bang comment\n\
                    readproportion=0.5\n\
                    updateproportion = 0.5\n\
                    scanproportion: 0\n\
                    insertproportion 0\n\
                    requestdistribution=zipfian\n\
                    long=a\\\n   b\n";
        let mut p = Props::new();
        p.load_str(text);
        assert_eq!(p.u64_or("recordcount", 0).ok(), Some(1000));
        assert_eq!(p.get("workload"), Some("site.ycsb.workloads.CoreWorkload"));
        assert!(p.bool_or("readallfields", false));
        assert_eq!(p.f64_or("readproportion", 0.0).ok(), Some(0.5));
        assert_eq!(p.f64_or("updateproportion", 0.0).ok(), Some(0.5));
        assert_eq!(p.get("scanproportion"), Some("0"));
        assert_eq!(p.get("insertproportion"), Some("0"));
        assert_eq!(p.get("requestdistribution"), Some("zipfian"));
        assert_eq!(p.get("long"), Some("ab"));
        assert_eq!(p.iter().count(), 10);
    }

    #[test]
    fn overrides_and_errors() {
        let mut p = Props::new();
        p.load_str("recordcount=1000\n");
        p.set_pair("recordcount=50").expect("valid pair");
        p.set_pair("requestdistribution=latest")
            .expect("valid pair");
        assert_eq!(p.u64_or("recordcount", 0).ok(), Some(50));
        assert_eq!(p.str_or("requestdistribution", "uniform"), "latest");
        assert_eq!(p.u64_or("operationcount", 7).ok(), Some(7));
        assert!(p.set_pair("novalue").is_err());
        assert!(p.set_pair("=x").is_err());
        p.set("fieldcount", "ten");
        let err = p.u64_or("fieldcount", 10).expect_err("not a number");
        assert!(err.to_string().contains("fieldcount"), "{err}");
        p.set("readproportion", "NaN");
        assert!(p.f64_or("readproportion", 0.5).is_err());
        p.set("readallfields", "yes");
        assert!(!p.bool_or("readallfields", true));
    }
}
