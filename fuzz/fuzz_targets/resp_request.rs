//! Client requests: whatever bytes arrive, the RESP request parser either
//! returns requests, waits for more, or reports a protocol error — never a
//! panic or an allocation sized by a length the client announced. And
//! parsing in pieces (as reads deliver them, resuming from `Partial`) gives
//! exactly what parsing the whole input at once gives.
#![no_main]

use bytes::{Bytes, BytesMut};
use elsa_server::resp::{parse_request_resuming, Limits};
use libfuzzer_sys::fuzz_target;

/// What a parse of a whole stream came to: the requests, then how it ended
/// (`None`: waiting for more input; `Some(e)`: the protocol error).
type Outcome = (Vec<Vec<Bytes>>, Option<String>);

fn parse_all(input: &[u8], chunk: usize, limits: &Limits) -> Outcome {
    let mut buf = BytesMut::new();
    let mut partial = None;
    let mut requests = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match parse_request_resuming(&mut buf, limits, &mut partial) {
                Ok(Some(args)) => requests.push(args),
                Ok(None) => break,
                Err(e) => return (requests, Some(e.0)),
            }
        }
    }
    (requests, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, input)) = data.split_first() else {
        return;
    };
    // Before AUTH (tiny limits, as a hostile stranger meets them) or after.
    let limits = if knobs & 1 == 0 {
        Limits {
            max_args: 10,
            max_bulk: 16 * 1024,
        }
    } else {
        Limits {
            max_args: 1024 * 1024,
            max_bulk: 512 * 1024 * 1024,
        }
    };
    let whole = parse_all(input, input.len(), &limits);
    let pieces = parse_all(input, 1 + (knobs >> 1) as usize, &limits);
    assert_eq!(whole, pieces, "parsing in pieces changed the requests");
    // Nothing parsed is larger than what arrived (no length was believed
    // beyond the bytes behind it). Inline requests have no argument limit
    // but their line's (64 KiB), as in Redis, so counts are not checked.
    let parsed: usize = whole.0.iter().flatten().map(|a| a.len()).sum();
    assert!(parsed <= input.len());
});
