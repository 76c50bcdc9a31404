//! Anti-entropy arithmetic: comparing two replicas' bucket digests in two
//! levels (256 groups of 256 buckets, then the buckets of groups that
//! differ), so a round between replicas in sync costs one small message
//! each way and a round after a partition ships only the buckets that
//! differ. Pure functions: the service and the simulation share them.

use elsa_shard::table::DIGEST_BUCKETS;

use crate::ring::Ring;

/// Buckets per group.
pub const GROUP: usize = 256;

/// The node's digest per bucket: each bucket's digest from the local shard
/// that holds it.
pub fn node_digest(ring: &Ring, shards: &[Box<[u64]>]) -> Vec<u64> {
    (0..DIGEST_BUCKETS)
        .map(|b| {
            shards
                .get(usize::from(ring.own_shard(b)))
                .map_or(0, |d| d[b])
        })
        .collect()
}

/// XOR digest of each group over the `shared` buckets (sorted), as
/// parallel (group, digest) lists.
pub fn group_digests(digest: &[u64], shared: &[u16]) -> (Vec<u32>, Vec<u64>) {
    let mut groups: Vec<u32> = Vec::new();
    let mut digests: Vec<u64> = Vec::new();
    for &b in shared {
        let g = (usize::from(b) / GROUP) as u32;
        if groups.last() != Some(&g) {
            groups.push(g);
            digests.push(0);
        }
        if let Some(d) = digests.last_mut() {
            // Mix the bucket number in, so equal digests in swapped
            // buckets do not cancel out.
            *d ^= digest[usize::from(b)].rotate_left(u32::from(b) % 64);
        }
    }
    (groups, digests)
}

/// Groups whose digests differ, or that only one side listed.
pub fn differing_groups(
    mine: &(Vec<u32>, Vec<u64>),
    theirs_groups: &[u32],
    theirs_digests: &[u64],
) -> Vec<u32> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < mine.0.len() || j < theirs_groups.len() {
        match (mine.0.get(i), theirs_groups.get(j)) {
            (Some(a), Some(b)) if a == b => {
                if mine.1[i] != theirs_digests.get(j).copied().unwrap_or(0) {
                    out.push(*a);
                }
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                out.push(*a);
                i += 1;
            }
            (Some(_), Some(b)) => {
                out.push(*b);
                j += 1;
            }
            (Some(a), None) => {
                out.push(*a);
                i += 1;
            }
            (None, Some(b)) => {
                out.push(*b);
                j += 1;
            }
            (None, None) => break,
        }
    }
    out
}

/// The shared buckets inside `groups`, with their digests.
pub fn bucket_digests(digest: &[u64], shared: &[u16], groups: &[u32]) -> (Vec<u32>, Vec<u64>) {
    shared
        .iter()
        .filter(|&&b| {
            groups
                .binary_search(&((usize::from(b) / GROUP) as u32))
                .is_ok()
        })
        .map(|&b| (u32::from(b), digest[usize::from(b)]))
        .unzip()
}

/// Buckets where `theirs` differs from this node's digest; buckets of the
/// differing groups they did not list (they hold nothing there) count too.
pub fn differing_buckets(
    digest: &[u64],
    shared: &[u16],
    groups: &[u32],
    theirs_buckets: &[u32],
    theirs_digests: &[u64],
) -> Vec<u32> {
    let (mine_b, mine_d) = bucket_digests(digest, shared, groups);
    let mut out: Vec<u32> = Vec::new();
    for (b, d) in mine_b.iter().zip(&mine_d) {
        let theirs = theirs_buckets
            .binary_search(b)
            .ok()
            .and_then(|i| theirs_digests.get(i));
        if theirs != Some(d) {
            out.push(*b);
        }
    }
    for (b, _) in theirs_buckets.iter().zip(theirs_digests) {
        if mine_b.binary_search(b).is_err() {
            out.push(*b);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// A bitmap of buckets, as the shard's entry scan wants it.
pub fn bitmap(buckets: &[u32]) -> Vec<u64> {
    let mut bits = vec![0u64; DIGEST_BUCKETS / 64];
    for &b in buckets {
        if let Some(w) = bits.get_mut(b as usize / 64) {
            *w |= 1 << (b % 64);
        }
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_digests_agree_and_one_change_is_found_to_its_bucket() {
        let shared: Vec<u16> = (0..DIGEST_BUCKETS as u32)
            .step_by(3)
            .map(|b| b as u16)
            .collect();
        let a: Vec<u64> = (0..DIGEST_BUCKETS as u64).map(|i| i * 7919).collect();
        let mut b = a.clone();
        let ga = group_digests(&a, &shared);
        assert!(differing_groups(&ga, &ga.0, &ga.1).is_empty());
        b[3 * 1000] ^= 1;
        let gb = group_digests(&b, &shared);
        let groups = differing_groups(&ga, &gb.0, &gb.1);
        assert_eq!(groups, vec![(3000 / GROUP) as u32]);
        let (bb, bd) = bucket_digests(&b, &shared, &groups);
        assert_eq!(
            differing_buckets(&a, &shared, &groups, &bb, &bd),
            vec![3000]
        );
        // A bucket not shared is never compared.
        let mut c = a.clone();
        c[1] ^= 1;
        let gc = group_digests(&c, &shared);
        assert!(differing_groups(&ga, &gc.0, &gc.1).is_empty());
    }
}
