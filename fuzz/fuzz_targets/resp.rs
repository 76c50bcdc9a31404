//! Fuzzes the RESP request parser: any byte stream, cut at any point, must
//! parse, ask for more, or fail with a protocol error — never panic, loop or
//! allocate from a declared length.
#![no_main]

use bytes::BytesMut;
use elsa_server::resp::{parse_request, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_args: 1024,
        max_bulk: 64 * 1024,
    };
    // Feed the input in two parts, as the network would.
    let cut = data.first().map_or(0, |b| *b as usize % (data.len() + 1));
    let mut buf = BytesMut::from(&data[..cut]);
    let mut fed_rest = false;
    loop {
        let before = buf.len();
        match parse_request(&mut buf, &limits) {
            Ok(Some(args)) => {
                assert!(args.len() <= limits.max_args);
                assert!(buf.len() < before, "a parsed request must consume input");
            }
            Ok(None) if !fed_rest => {
                buf.extend_from_slice(&data[cut..]);
                fed_rest = true;
            }
            Ok(None) | Err(_) => break,
        }
    }
});
