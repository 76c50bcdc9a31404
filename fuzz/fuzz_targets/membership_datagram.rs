//! Membership datagrams (UDP, `membership::Sealer`): any bytes that arrive
//! are refused unless sealed with the cluster's key — without a panic —
//! and a sealed datagram opens to exactly what was sealed, while changing
//! any one byte of it makes it refused.
#![no_main]

use elsa_cluster::membership::{Sealer, Unsealed};
use libfuzzer_sys::fuzz_target;

const NOW_MS: u64 = 1_800_000_000_000;

fuzz_target!(|data: &[u8]| {
    let sealer = Sealer::new(&[7; 32]);
    // Forged: nobody without the key makes a datagram that opens.
    let mut forged = data.to_vec();
    assert_eq!(sealer.open(&mut forged, NOW_MS), Err(Unsealed::Forged));
    // Sealed: opens to the payload, whatever the payload is.
    let mut sealed = sealer.seal(data, NOW_MS);
    let mut tampered = sealed.clone();
    assert_eq!(sealer.open(&mut sealed, NOW_MS + 1), Ok(data));
    let at = data.first().map_or(0, |&b| b as usize) % tampered.len();
    tampered[at] ^= 1 + data.get(1).copied().unwrap_or(0) % 255;
    assert_eq!(sealer.open(&mut tampered, NOW_MS), Err(Unsealed::Forged));
});
