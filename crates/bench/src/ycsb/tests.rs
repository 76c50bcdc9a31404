//! YCSB workload unit tests: property defaults, operation mix, key names.
use super::*;

fn workload(text: &str) -> Workload {
    let mut p = Props::new();
    p.load_str(text);
    Workload::from_props("t", &p).expect("valid workload")
}

#[test]
fn defaults_and_key_names_match_ycsb() {
    let w = workload("");
    assert_eq!(
        (w.fieldcount, w.recordcount, w.operationcount, w.threads),
        (10, 1000, 1000, 1)
    );
    assert!(w.readallfields && !w.writeallfields);
    assert_eq!(w.requestdistribution, "uniform");
    // YCSB's first loaded key (hashed insert order).
    assert_eq!(w.key(0), "user6284781860667377211");
    assert_eq!(w.field_key("user1", 3), "user1:field3");
    let o = workload("insertorder=ordered\nzeropadding=5\n");
    assert_eq!(o.key(42), "user00042");
}

#[test]
fn rejects_bad_properties() {
    for bad in [
        "requestdistribution=exponential",
        "insertorder=random",
        "fieldcount=0",
        "readproportion=0\nupdateproportion=0",
        "table=users;drop",
        "workload=site.ycsb.workloads.RestWorkload",
        "fieldlengthdistribution=normal",
    ] {
        let mut p = Props::new();
        p.load_str(bad);
        assert!(Workload::from_props("t", &p).is_err(), "{bad}");
    }
}

#[test]
fn operation_mix_follows_proportions() {
    let w = workload("readproportion=0.5\nupdateproportion=0.3\nscanproportion=0.2\n");
    let mut rng = StdRng::seed_from_u64(9);
    let mut counts = [0u32; 5];
    for _ in 0..100_000 {
        counts[w.pick_op(&mut rng) as usize] += 1;
    }
    assert!((49_000..51_000).contains(&counts[0]), "{counts:?}");
    assert!((29_000..31_000).contains(&counts[1]), "{counts:?}");
    assert_eq!(counts[2], 0);
    assert!((19_000..21_000).contains(&counts[3]), "{counts:?}");
}

#[test]
fn shipped_workload_files_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workloads");
    for name in [
        "workloada",
        "workloadb",
        "workloadc",
        "workloadd",
        "workloade",
        "workloadf",
    ] {
        let mut p = Props::new();
        p.load_file(&dir.join(name)).expect("workload file exists");
        let w = Workload::from_props(name, &p).expect("parses");
        assert!(w.recordcount > 0 && w.operationcount > 0, "{name}");
    }
}
