//! The client address from the TCP peer and `X-Forwarded-For` lines: from any peer, from
//! a trusted proxy (where the lines are read), and as a proxy appends to a client's line.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use seckill_fuzz::checks::{check_forwarded_by_proxy, check_forwarded_for, PROXIES};

fuzz_target!(|input: (u8, IpAddr, Vec<&[u8]>)| {
    let (mode, address, lines) = input;
    match mode % 3 {
        0 => {
            check_forwarded_for(address, &lines);
        }
        1 => {
            check_forwarded_for(PROXIES[0], &lines);
        }
        _ => check_forwarded_by_proxy(lines.first().copied().unwrap_or_default(), address),
    }
});
