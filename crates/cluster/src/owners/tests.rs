//! Three nodes' ownership groups in one process, over channels that a
//! test can cut, with clocks apart by less than the drift: at no sample
//! does a slot have two nodes that may serve it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::Weak;
use std::time::Instant;

use async_trait::async_trait;

use super::*;

/// Connects the nodes; a cut pair drops every call between them.
#[derive(Default)]
struct Mesh {
    nodes: Mutex<HashMap<NodeId, Weak<Region>>>,
    cut: Mutex<HashSet<(NodeId, NodeId)>>,
}

struct Link {
    from: NodeId,
    mesh: Arc<Mesh>,
}

#[async_trait]
impl Carrier for Link {
    async fn call(&self, to: NodeId, request: Vec<u8>) -> Result<Vec<u8>, String> {
        let cut = |m: &Mesh| m.cut.lock().unwrap().contains(&(self.from, to));
        if cut(&self.mesh) {
            return Err("cut".into());
        }
        let region = self
            .mesh
            .nodes
            .lock()
            .unwrap()
            .get(&to)
            .and_then(Weak::upgrade);
        let Some(region) = region else {
            return Err("no such node".into());
        };
        let answer = region.answer(&request).await;
        // A cut made meanwhile drops the answer too.
        if cut(&self.mesh) {
            return Err("cut".into());
        }
        Ok(answer)
    }
}

fn member(node: NodeId) -> Member {
    let addr = SocketAddr::from(([127, 0, 0, 1], 7000 + node as u16));
    Member {
        node,
        region: "a".into(),
        shards: 2,
        peer: addr,
        client: addr,
        ready: true,
        leaving: false,
    }
}

const DRIFT: Duration = Duration::from_millis(300);

async fn start(mesh: &Arc<Mesh>, node: NodeId, offset_ms: i64) -> Arc<Region> {
    start_in(mesh, node, offset_ms, None).await
}

async fn start_in(
    mesh: &Arc<Mesh>,
    node: NodeId,
    offset_ms: i64,
    dir: Option<&Path>,
) -> Arc<Region> {
    let clock: Clock = Arc::new(move || (elsa_shard::unix_ms() as i64 + offset_ms) as u64);
    let region = Region::start(
        node,
        dir,
        8,
        3,
        DRIFT,
        clock,
        Arc::new(Link {
            from: node,
            mesh: mesh.clone(),
        }),
        Box::new(move || member(node)),
        Arc::new(|| {}),
    )
    .await
    .unwrap();
    mesh.nodes
        .lock()
        .unwrap()
        .insert(node, Arc::downgrade(&region));
    region
}

fn cut(mesh: &Mesh, a: NodeId, others: &[NodeId]) {
    let mut c = mesh.cut.lock().unwrap();
    for &b in others {
        c.insert((a, b));
        c.insert((b, a));
    }
}

/// How many slots (of every 16th) each node may serve, checking that no
/// slot has two.
fn census(nodes: &[Arc<Region>]) -> Vec<usize> {
    let mut counts = vec![0; nodes.len()];
    for slot in (0..DIGEST_BUCKETS).step_by(16) {
        let serving: Vec<usize> = (0..nodes.len())
            .filter(|&i| nodes[i].may_serve(slot))
            .collect();
        assert!(serving.len() <= 1, "slot {slot} served by {serving:?}");
        for i in serving {
            counts[i] += 1;
        }
    }
    counts
}

async fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_its_region_stops_serving_before_the_others_take_over() {
    let mesh = Arc::new(Mesh::default());
    // Clocks apart by less than the drift.
    let nodes = vec![
        start(&mesh, 1, 0).await,
        start(&mesh, 2, 120).await,
        start(&mesh, 3, -120).await,
    ];
    let voters: BTreeMap<NodeId, SocketAddr> = (1..=3).map(|n| (n, member(n).peer)).collect();
    nodes[0].found(&voters).await.unwrap();
    let total = DIGEST_BUCKETS / 16;
    wait_for(
        "every slot served, by all three",
        Duration::from_secs(10),
        || {
            let c = census(&nodes);
            c.iter().sum::<usize>() == total && c.iter().all(|&n| n > 0)
        },
    )
    .await;

    // A sampler checks one owner at most per slot all along.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (nodes, stop) = (nodes.clone(), stop.clone());
        tokio::spawn(async move {
            let mut samples = 0;
            while !stop.load(Ordering::Relaxed) {
                census(&nodes);
                samples += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            samples
        })
    };

    // Node 1 is cut off: it stops serving, then 2 and 3 serve everything.
    cut(&mesh, 1, &[2, 3]);
    let cut_at = Instant::now();
    wait_for("2 and 3 serve every slot", Duration::from_secs(15), || {
        let c = census(&nodes);
        c[0] == 0 && c[1] + c[2] == total
    })
    .await;
    let took = cut_at.elapsed();
    assert!(
        took >= LEASE,
        "taken over in {took:?}, before node 1's lease ended"
    );

    // Healed: node 1 is back in and serves again.
    mesh.cut.lock().unwrap().clear();
    wait_for("node 1 serves again", Duration::from_secs(15), || {
        let c = census(&nodes);
        c[0] > 0 && c.iter().sum::<usize>() == total
    })
    .await;

    stop.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    assert!(samples > 100, "{samples} samples");
    for n in &nodes {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_cut_off_is_replaced_and_a_node_joins_later() {
    let mesh = Arc::new(Mesh::default());
    let mut nodes = vec![start(&mesh, 1, 0).await, start(&mesh, 2, 50).await];
    let voters: BTreeMap<NodeId, SocketAddr> = (1..=2).map(|n| (n, member(n).peer)).collect();
    nodes[0].found(&voters).await.unwrap();
    let total = DIGEST_BUCKETS / 16;
    wait_for("every slot served", Duration::from_secs(10), || {
        census(&nodes).iter().sum::<usize>() == total
    })
    .await;
    // A third node: membership sees it, the leader makes it a voter, and
    // it takes slots.
    nodes.push(start(&mesh, 3, -50).await);
    let alive: BTreeMap<NodeId, SocketAddr> = (1..=3).map(|n| (n, member(n).peer)).collect();
    for n in &nodes {
        n.set_alive(alive.clone());
    }
    wait_for("node 3 serves", Duration::from_secs(15), || {
        census(&nodes)[2] > 0
    })
    .await;
    // The leader is cut off: the other two elect one and serve it all.
    let leader = nodes[0].leader().expect("a leader");
    let others: Vec<NodeId> = (1..=3).filter(|&n| n != leader).collect();
    cut(&mesh, leader, &others);
    wait_for(
        "the other two serve everything",
        Duration::from_secs(15),
        || {
            let c = census(&nodes);
            c[leader as usize - 1] == 0 && c.iter().sum::<usize>() == total
        },
    )
    .await;
    for n in &nodes {
        n.shutdown().await;
    }
}

/// Issue 42: a node that leaves the region for good is forgotten — its
/// vote too — so the majority is counted among the nodes that remain: with
/// node 3 gone and node 4 joined, nodes 1 and 4 serve everything while
/// node 2 is cut off (2 of 3 voters; kept as a voter, node 3 would make
/// it 2 of 4, and nothing would be served).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_left_is_forgotten_and_no_longer_counts_for_the_majority() {
    let mesh = Arc::new(Mesh::default());
    let mut nodes = vec![
        start(&mesh, 1, 0).await,
        start(&mesh, 2, 50).await,
        start(&mesh, 3, -50).await,
    ];
    let voters: BTreeMap<NodeId, SocketAddr> = (1..=3).map(|n| (n, member(n).peer)).collect();
    nodes[0].found(&voters).await.unwrap();
    let total = DIGEST_BUCKETS / 16;
    wait_for("every slot served", Duration::from_secs(10), || {
        census(&nodes).iter().sum::<usize>() == total
    })
    .await;
    nodes[2].leave().await.unwrap();
    wait_for("node 3 no longer a voter", Duration::from_secs(15), || {
        nodes[0].view().voters == BTreeSet::from([1, 2])
    })
    .await;
    nodes[2].shutdown().await;
    cut(&mesh, 3, &[1, 2, 4]);
    nodes.push(start(&mesh, 4, 20).await);
    let alive: BTreeMap<NodeId, SocketAddr> = [1, 2, 4].map(|n| (n, member(n).peer)).into();
    for n in &nodes {
        n.set_alive(alive.clone());
    }
    wait_for("node 4 a voter", Duration::from_secs(15), || {
        nodes[0].view().voters == BTreeSet::from([1, 2, 4])
    })
    .await;
    cut(&mesh, 2, &[1, 3, 4]);
    wait_for(
        "nodes 1 and 4 serve everything",
        Duration::from_secs(20),
        || {
            let c = census(&nodes);
            c[1] == 0 && c[2] == 0 && c[0] + c[3] == total
        },
    )
    .await;
    for n in &nodes {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_alone_keeps_its_group_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("elsa-owners-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let total = DIGEST_BUCKETS / 16;
    let mesh = Arc::new(Mesh::default());
    let one = start_in(&mesh, 1, 0, Some(&dir)).await;
    one.found(&[(1, member(1).peer)].into()).await.unwrap();
    let nodes = vec![one];
    wait_for("it serves every slot", Duration::from_secs(10), || {
        census(&nodes)[0] == total
    })
    .await;
    let before = nodes[0].view().index;
    nodes[0].shutdown().await;
    drop(nodes);

    let again = start_in(&mesh, 1, 0, Some(&dir)).await;
    assert!(again.is_formed().await, "the group is remembered");
    assert!(
        !again.may_serve(0),
        "no lease before a beat after the restart"
    );
    let nodes = vec![again];
    wait_for("it serves again", Duration::from_secs(10), || {
        census(&nodes)[0] == total
    })
    .await;
    assert!(nodes[0].view().index > before);
    nodes[0].shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
