//! The Go checker (`tests/linearizability/porcupine`: porcupine for
//! register keys, an exact monotonic search of its own for counter keys,
//! `counter.go`): built once per test run into the cargo target dir, then
//! run on a saved history, or on random histories of its own (`-selftest`). Without Go the tests fail and say so: a checker that cannot
//! run must not look like a pass.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The checker's verdict on a history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    NotLinearizable,
    /// No verdict within the checker's timeout.
    Undecided,
}

/// What the checker said.
pub struct Report {
    pub verdict: Verdict,
    /// Its stdout: per bad key, why; then a one-line summary.
    pub output: String,
}

/// The `go` command: `$GO`, else `go` on PATH, else the default install.
fn go() -> PathBuf {
    if let Some(go) = std::env::var_os("GO") {
        return go.into();
    }
    let on_path = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return "go".into();
    }
    let installed = Path::new("/usr/local/go/bin/go");
    if installed.exists() {
        return installed.into();
    }
    panic!(
        "the linearizability checker needs Go (https://go.dev/dl/, 1.21 or later) to build \
         tests/linearizability/porcupine: `go` is not on PATH, /usr/local/go/bin/go does not \
         exist and $GO is not set"
    );
}

/// The checker binary, built on first use (`go build` fetches porcupine
/// through the module proxy the first time; go.sum pins it).
pub fn binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("CARGO_TARGET_TMPDIR is inside the target dir")
            .to_path_buf();
        let bin = target.join("lin-checker");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/linearizability/porcupine");
        let go = go();
        let out = Command::new(&go)
            .arg("build")
            .arg("-o")
            .arg(&bin)
            .arg(".")
            .current_dir(&src)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "the linearizability checker needs Go: `{} build` failed to start ({e}); \
                     install Go 1.21 or later, or point $GO at it",
                    go.display()
                )
            });
        assert!(
            out.status.success(),
            "go build of {} failed ({}):\n{}{}",
            src.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    })
}

/// Checks the history saved at `history`; with `html`, porcupine's
/// visualization of the keys that fail (if any) goes there.
pub fn check(history: &Path, html: Option<&Path>, timeout: Duration) -> Report {
    let mut cmd = Command::new(binary());
    cmd.arg("-timeout")
        .arg(format!("{}s", timeout.as_secs().max(1)));
    if let Some(html) = html {
        cmd.arg("-html").arg(html);
    }
    let out = cmd
        .arg(history)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary().display()));
    let output = String::from_utf8_lossy(&out.stdout).into_owned();
    let verdict = match out.status.code() {
        Some(0) => Verdict::Linearizable,
        Some(1) => Verdict::NotLinearizable,
        Some(3) => Verdict::Undecided,
        _ => panic!(
            "the checker failed on {} ({}):\n{output}{}",
            history.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    Report { verdict, output }
}

/// Runs the checker's self-test: its counter check against porcupine on
/// `histories` random small counter histories (`seed`, from 1 to
/// `i64::MAX`, picks them). True when every verdict agreed; the report says
/// how many of each there were.
pub fn selftest(histories: usize, seed: u64) -> (bool, String) {
    let out = Command::new(binary())
        .arg("-selftest")
        .arg(histories.to_string())
        .arg("-seed")
        .arg(seed.to_string())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary().display()));
    let output = String::from_utf8_lossy(&out.stdout).into_owned();
    match out.status.code() {
        Some(0) => (true, output),
        Some(1) => (false, output),
        _ => panic!(
            "the checker's self-test failed to run ({}):\n{output}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}
