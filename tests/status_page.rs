//! The status page in a real headless Chromium, driven through chromedriver
//! (WebDriver, `fantoccini`), on a 2-region × 2-node cluster with a metrics
//! port on every node: the figures the page renders (read from the `data-*`
//! attributes it gives them) checked against INFO of the nodes — regions,
//! nodes, who is alive, primary slots summing to 65536 per region,
//! catching-up flags, commands and conflicts — its live refresh (figures
//! move after more writes, a killed node turns down), and a screenshot in
//! `target/status-page.png`. The same cluster's `/metrics`: peer families
//! per peer with the right labels, membership as INFO says.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{free_tcp_udp_port, Cluster};
use common::openmetrics::scrape;
use serde_json::Value;

/// A chromedriver child, killed by PID when dropped.
struct Chromedriver {
    child: Child,
    port: u16,
}

impl Chromedriver {
    fn start() -> Chromedriver {
        let port = free_tcp_udp_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian package chromium-driver; scripts/test.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Chromedriver { child, port }
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session and the runtime its client runs on.
struct Browser {
    rt: tokio::runtime::Runtime,
    client: Option<fantoccini::Client>,
    _profile: common::TestDir,
    _driver: Chromedriver,
}

impl Browser {
    fn start() -> Browser {
        let driver = Chromedriver::start();
        let profile = common::TestDir::new("chromium-profile");
        std::fs::create_dir_all(&profile.root).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Root, no display, a closed network: without these Chromium
        // refuses to start or stalls on Google hosts.
        let args = [
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1400,900".into(),
            format!("--user-data-dir={}", profile.root.display()),
        ];
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "args": args, "binary": "/usr/bin/chromium" }),
        );
        let url = format!("http://127.0.0.1:{}", driver.port);
        let client = rt
            .block_on(
                fantoccini::ClientBuilder::new(
                    hyper_util::client::legacy::connect::HttpConnector::new(),
                )
                .capabilities(caps)
                .connect(&url),
            )
            .expect("a Chromium session through chromedriver");
        Browser {
            rt,
            client: Some(client),
            _profile: profile,
            _driver: driver,
        }
    }

    fn client(&self) -> &fantoccini::Client {
        self.client.as_ref().expect("open")
    }

    fn goto(&self, url: &str) {
        self.rt.block_on(self.client().goto(url)).expect("goto");
    }

    /// Runs `script` in the page and returns its result.
    fn eval(&self, script: &str) -> Value {
        self.rt
            .block_on(self.client().execute(script, vec![]))
            .expect("execute")
    }

    fn screenshot(&self, path: &std::path::Path) {
        let png = self
            .rt
            .block_on(self.client().screenshot())
            .expect("screenshot");
        std::fs::write(path, png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = self.rt.block_on(c.close());
        }
    }
}

/// What the page shows, read from the DOM it rendered.
const READ_PAGE: &str = r#"
const fig = (id) => document.getElementById(id).dataset.value;
return {
  samples: Number(document.body.dataset.samples),
  title: document.getElementById("title").textContent,
  commands: fig("commands"), commits: fig("commits"), conflicts: fig("conflicts"),
  ops: fig("ops-per-sec"), serving: fig("serving"), keys: fig("keys"),
  regions: [...document.querySelectorAll("section.region")].map((s) => ({
    name: s.dataset.region, nodes: Number(s.dataset.nodes), slots: Number(s.dataset.slots),
  })),
  nodes: [...document.querySelectorAll("tr.node")].map((r) => ({
    node: Number(r.dataset.node), region: r.dataset.region, alive: r.dataset.alive === "1",
    ready: r.dataset.ready === "1", catching_up: r.dataset.catchingUp === "1",
    slots: Number(r.dataset.slots), self: r.dataset.self === "1",
    client: r.children[1].textContent,
  })),
  lag: [...document.querySelectorAll("tr.lag")].map((r) => ({ from: r.dataset.from, to: r.dataset.to })),
};
"#;

/// Polls the page until `ok` holds for what it shows (or panics with the
/// last reading after `within`).
fn wait_page(b: &Browser, within: Duration, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let page = b.eval(READ_PAGE);
        if ok(&page) {
            return page;
        }
        assert!(
            Instant::now() < deadline,
            "page never showed {what}: {page:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `INFO replication`'s peer lines: node id → (region, client, state).
fn info_peers(info: &str) -> BTreeMap<u64, (String, String, String)> {
    info.lines()
        .filter(|l| l.starts_with("peer") && l.contains(":node="))
        .map(|l| {
            let fields: HashMap<&str, &str> = l
                .split_once(':')
                .unwrap()
                .1
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .collect();
            (
                fields["node"].parse().unwrap(),
                (
                    fields["region"].to_string(),
                    fields["client"].to_string(),
                    fields["state"].to_string(),
                ),
            )
        })
        .collect()
}

fn info_field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("INFO has no {name}"))
        .trim()
        .to_string()
}

fn num(v: &Value) -> f64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_f64())
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn status_page_in_chromium_matches_info_and_refreshes() {
    let regions = ["r1", "r1", "r2", "r2"];
    let mports: Vec<u16> = regions.iter().map(|_| free_tcp_udp_port()).collect();
    let mut cluster = Cluster::start_each(&regions, &[], |i| {
        vec!["--metrics-port".into(), mports[i].to_string()]
    });
    let browser = Browser::start();
    browser.goto(&format!("http://127.0.0.1:{}/", mports[0]));
    let page = wait_page(&browser, Duration::from_secs(30), "a first sample", |p| {
        p["samples"].as_u64() >= Some(1)
    });

    // --- The cluster map against INFO of every node.
    let info0 = cluster.info_replication(0);
    assert_eq!(info_field(&info0, "regions"), "r1,r2");
    assert_eq!(info_field(&info0, "members"), "4");
    let peers = info_peers(&info0);
    assert_eq!(peers.len(), 3);
    let shown_regions: BTreeSet<String> = page["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(shown_regions, ["r1", "r2"].map(String::from).into());
    for r in page["regions"].as_array().unwrap() {
        assert_eq!(r["nodes"], 2, "two nodes alive in {r}");
        assert_eq!(r["slots"], 65536, "every slot has a primary in {r}");
    }
    let nodes = page["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4);
    let mut slots_per_region: BTreeMap<String, u64> = BTreeMap::new();
    for n in nodes {
        let id = n["node"].as_u64().unwrap();
        let i = (id - 1) as usize;
        let region = n["region"].as_str().unwrap();
        assert_eq!(region, regions[i], "node {id}'s region");
        assert_eq!(n["self"], id == 1);
        assert_eq!(n["alive"], true);
        // Catching up as the node itself says.
        let own = cluster.info_replication(i);
        assert_eq!(
            n["catching_up"],
            info_field(&own, "catching_up") == "1",
            "node {id}"
        );
        assert_eq!(info_field(&own, "region"), region);
        if id != 1 {
            let (r, client, state) = &peers[&id];
            assert_eq!(r, region);
            assert_eq!(n["client"].as_str().unwrap(), client, "node {id}'s address");
            assert_eq!(state, "up");
        } else {
            assert_eq!(n["client"], format!("127.0.0.1:{}", cluster.port(0)));
        }
        let slots = n["slots"].as_u64().unwrap();
        assert!(slots > 0, "node {id} is the primary of some slots");
        *slots_per_region.entry(region.to_string()).or_default() += slots;
    }
    assert_eq!(
        slots_per_region,
        [("r1".to_string(), 65536), ("r2".to_string(), 65536)].into()
    );
    // Lag rows: only the pairs this node's region is in.
    let lag: BTreeSet<(String, String)> = page["lag"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["from"].as_str().unwrap().into(),
                l["to"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(lag.contains(&("r2".into(), "r1".into())), "{lag:?}");
    assert!(lag.contains(&("r1".into(), "r2".into())), "{lag:?}");
    assert_eq!(page["serving"], "serving");
    assert!(page["title"].as_str().unwrap().contains("node 1"));

    // --- Counters: writes to node 1 show up, and agree with INFO.
    let mut c = cluster.conn(0);
    let before: u64 = info_field(&cluster.info(0, "stats"), "total_commands_processed")
        .parse()
        .unwrap();
    let writes = 300;
    for i in 0..writes {
        let _: () = redis::cmd("SET")
            .arg(format!("page-{i}"))
            .arg(i)
            .query(&mut c)
            .unwrap();
    }
    let page = wait_page(&browser, Duration::from_secs(30), "the writes", |p| {
        num(&p["commands"]) >= (before + writes) as f64
    });
    let stats = cluster.info(0, "stats");
    let after: f64 = info_field(&stats, "total_commands_processed")
        .parse()
        .unwrap();
    assert!(
        num(&page["commands"]) <= after,
        "the page never shows more than INFO later does"
    );
    let tx = cluster.info(0, "transactions");
    assert_eq!(
        num(&page["conflicts"]),
        info_field(&tx, "conflicts").parse::<f64>().unwrap()
    );
    assert_eq!(
        num(&page["commits"]),
        info_field(&tx, "commits").parse::<f64>().unwrap()
    );
    // The rate is computed from successive samples: with writes going on
    // between two samples it is above zero.
    let samples_then = page["samples"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let page = loop {
        for i in 0..50 {
            let _: () = redis::cmd("SET")
                .arg(format!("more-{i}"))
                .arg(i)
                .query(&mut c)
                .unwrap();
        }
        let p = browser.eval(READ_PAGE);
        if p["samples"].as_u64().unwrap() > samples_then + 1 && num(&p["ops"]) > 0.0 {
            break p;
        }
        assert!(Instant::now() < deadline, "ops/s never moved: {p:#}");
    };
    assert!(
        num(&page["commands"]) > (before + writes) as f64,
        "refreshed after more writes"
    );

    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .to_path_buf();
    browser.screenshot(&target.join("status-page.png"));

    // --- The same node's /metrics: membership and per-peer families.
    let m = scrape(mports[0]);
    for r in ["r1", "r2"] {
        assert_eq!(m.value("elsa_cluster_members", &[("region", r)]), Some(2.0));
    }
    for n in nodes {
        let id = n["node"].as_u64().unwrap().to_string();
        let region = n["region"].as_str().unwrap();
        let labels = [("node", id.as_str()), ("region", region)];
        assert_eq!(m.value("elsa_cluster_node_up", &labels), Some(1.0));
        assert_eq!(
            m.value("elsa_cluster_node_primary_slots", &labels),
            n["slots"].as_f64(),
            "node {id}: /metrics and the page agree"
        );
        assert_eq!(m.value("elsa_cluster_node_catching_up", &labels), Some(0.0));
    }
    for (id, (region, _, state)) in &peers {
        let id = id.to_string();
        let labels = [("peer", id.as_str()), ("region", region.as_str())];
        for family in [
            "elsa_peer_lag_ms",
            "elsa_peer_queued_frames",
            "elsa_antientropy_last_differing_buckets",
            "elsa_gossip_stream_wait_ms",
            "elsa_gossip_stream_stuck",
        ] {
            assert!(m.value(family, &labels).is_some(), "{family} for peer {id}");
        }
        for family in [
            "elsa_peer_received_lattices_total",
            "elsa_antientropy_rounds_total",
            "elsa_antientropy_shipped_lattices_total",
            "elsa_peer_dropped_frames_total",
            "elsa_antientropy_waited_for_stream_total",
        ] {
            assert!(m.value(family, &labels).is_some(), "{family} for peer {id}");
        }
        assert_eq!(
            m.value("elsa_peer_link_up", &labels),
            Some(if state == "up" { 1.0 } else { 0.0 })
        );
    }
    assert_eq!(m.samples("elsa_peer_lag_ms").len(), 3, "one per peer");
    // Anti-entropy runs with every peer in turn: each round shows.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = scrape(mports[0]);
        if m.samples("elsa_antientropy_rounds_total")
            .iter()
            .all(|s| s.value > 0.0)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no anti-entropy round with some peer"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The replication the page saw is what /metrics says.
    assert_eq!(m.value("elsa_serving", &[]), Some(1.0));

    // --- A node dies: the page turns it down, its region's slots move to
    // the survivor, as INFO of node 1 says.
    cluster.kill9(3);
    let page = wait_page(&browser, Duration::from_secs(90), "node 4 down", |p| {
        p["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["node"] == 4 && n["alive"] == false)
            && p["regions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["slots"] == 65536)
    });
    let info0 = cluster.info_replication(0);
    assert_eq!(info_field(&info0, "members"), "3");
    assert!(
        !info_peers(&info0).contains_key(&4),
        "INFO no longer lists node 4"
    );
    let r2 = page["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "r2")
        .unwrap()
        .clone();
    assert_eq!(r2["nodes"], 1);
    let survivor = page["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == 3)
        .unwrap()
        .clone();
    assert_eq!(
        survivor["slots"], 65536,
        "node 3 is the primary of all of r2"
    );
    browser.screenshot(&target.join("status-page-node-down.png"));
    let m = scrape(mports[0]);
    assert_eq!(
        m.value("elsa_cluster_node_up", &[("node", "4"), ("region", "r2")]),
        Some(0.0)
    );
    assert_eq!(
        m.value("elsa_cluster_members", &[("region", "r2")]),
        Some(1.0)
    );
}
