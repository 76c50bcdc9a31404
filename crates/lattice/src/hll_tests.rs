//! The bytes and estimates of redis-server 7.0.15 for the same commands
//! (`hll_data/*.bin`: `GET` right after the writes, made by a script that
//! ran `PFADD`/`PFMERGE` against it; the counts are its `PFCOUNT`s).

use super::*;

fn pfadd(v: &mut Vec<u8>, eles: impl IntoIterator<Item = String>) -> bool {
    let mut changed = false;
    for e in eles {
        changed |= add(v, e.as_bytes(), SPARSE_MAX_BYTES).expect("a valid HyperLogLog");
    }
    if changed {
        invalidate(v);
    }
    changed
}

fn new_with(eles: impl IntoIterator<Item = String>) -> Vec<u8> {
    let mut v = new_sparse();
    pfadd(&mut v, eles);
    v
}

fn pfmerge(srcs: &[&[u8]]) -> Vec<u8> {
    let mut max = vec![0u8; REGISTERS];
    let mut dense = false;
    for s in srcs {
        check(s).unwrap();
        dense |= is_dense(s);
        merge_into(&mut max, s).unwrap();
    }
    let mut dest = new_sparse();
    raise(&mut dest, &max, dense, SPARSE_MAX_BYTES).unwrap();
    dest
}

fn same(ours: &[u8], redis: &[u8], what: &str) {
    assert_eq!(ours.len(), redis.len(), "{what}: length");
    if let Some(i) = (0..ours.len()).find(|&i| ours[i] != redis[i]) {
        panic!(
            "{what}: first different byte at {i}: ours {:02x?}, Redis {:02x?}",
            &ours[i.saturating_sub(4)..(i + 8).min(ours.len())],
            &redis[i.saturating_sub(4)..(i + 8).min(redis.len())]
        );
    }
}

#[test]
fn pfadd_writes_redis_s_bytes_and_counts_as_it_does() {
    let abc = new_with(["a", "b", "c"].map(String::from));
    same(&abc, include_bytes!("hll_data/abc.bin"), "PFADD a b c");
    assert_eq!(count(&abc).unwrap(), 3);

    let e300 = new_with((0..300).map(|i| format!("e{i}")));
    same(&e300, include_bytes!("hll_data/e300.bin"), "300 elements");
    assert_eq!(count(&e300).unwrap(), 302);

    let e2000 = new_with((0..2000).map(|i| format!("e{i}")));
    assert!(is_dense(&e2000), "promoted past hll-sparse-max-bytes");
    same(
        &e2000,
        include_bytes!("hll_data/e2000.bin"),
        "2000 elements",
    );
    assert_eq!(count(&e2000).unwrap(), 2000);

    let mut x = new_sparse();
    for i in (0..50_000).step_by(1000) {
        pfadd(&mut x, (i..i + 1000).map(|j| format!("x{j}")));
    }
    same(&x, include_bytes!("hll_data/x50000.bin"), "50 000 elements");
    assert_eq!(count(&x).unwrap(), 49_908);

    let mut one = new_sparse();
    for i in 0..500 {
        pfadd(&mut one, [format!("k{}", i * 7)]);
    }
    same(
        &one,
        include_bytes!("hll_data/one500.bin"),
        "500 PFADDs of one element",
    );
    assert_eq!(count(&one).unwrap(), 501);
}

#[test]
fn pfmerge_and_pfcount_of_several_keys_match_redis() {
    let abc = include_bytes!("hll_data/abc.bin");
    let e300 = include_bytes!("hll_data/e300.bin");
    let e2000 = include_bytes!("hll_data/e2000.bin");
    let x = include_bytes!("hll_data/x50000.bin");
    let m = pfmerge(&[e300, abc]);
    same(
        &m,
        include_bytes!("hll_data/merge_sparse.bin"),
        "PFMERGE sparse",
    );
    assert_eq!(count(&m).unwrap(), 305);
    let md = pfmerge(&[e300, x]);
    same(
        &md,
        include_bytes!("hll_data/merge_dense.bin"),
        "PFMERGE dense",
    );
    assert_eq!(count(&md).unwrap(), 50_241);
    let mut max = vec![0u8; REGISTERS];
    for s in [&e300[..], &e2000[..], &abc[..]] {
        merge_into(&mut max, s).unwrap();
    }
    assert_eq!(count_registers(&max).unwrap(), 2003);
}

#[test]
fn the_lattice_join_is_order_free_and_loses_no_register() {
    let a = new_with((0..200).map(|i| format!("a{i}")));
    let b = new_with((0..250).map(|i| format!("b{i}")));
    let ab = merge(&a, &b, SPARSE_MAX_BYTES).unwrap();
    let ba = merge(&b, &a, SPARSE_MAX_BYTES).unwrap();
    assert_eq!(ab, ba, "commutative, byte for byte");
    assert_eq!(merge(&ab, &a, SPARSE_MAX_BYTES).unwrap(), ab, "idempotent");
    let both = new_with(
        (0..200)
            .map(|i| format!("a{i}"))
            .chain((0..250).map(|i| format!("b{i}"))),
    );
    assert_eq!(registers(&ab).unwrap(), registers(&both).unwrap());
}

#[test]
fn bad_values_are_refused_with_redis_s_errors() {
    assert_eq!(check(b"hello"), Err(HllError::NotHll));
    let mut v = new_sparse();
    v[4] = 7;
    assert_eq!(check(&v), Err(HllError::NotHll));
    let mut dense = include_bytes!("hll_data/e2000.bin").to_vec();
    dense.pop();
    assert_eq!(check(&dense), Err(HllError::NotHll));
    // Sparse opcodes that cover too few registers.
    let mut short = new_sparse();
    short.truncate(HDR);
    push_xzero(&mut short, 100);
    check(&short).unwrap();
    assert_eq!(count(&short), Err(HllError::Corrupt));
    assert_eq!(
        add(&mut short, b"zz", SPARSE_MAX_BYTES).err(),
        Some(HllError::Corrupt)
    );
    // Anything shorter than a header is refused, never indexed.
    for short in [&b""[..], b"HYLL", b"HYLL\x01"] {
        let mut v = short.to_vec();
        assert_eq!(count(&v), Err(HllError::NotHll));
        assert_eq!(add(&mut v, b"x", SPARSE_MAX_BYTES), Err(HllError::NotHll));
        assert_eq!(cached(&v), None);
        set_cached(&mut v, 1);
        invalidate(&mut v);
        assert!(!is_dense(&v));
    }
}
