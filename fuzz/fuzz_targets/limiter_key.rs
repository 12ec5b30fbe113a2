//! The limiter's Redis keys, from policy and rule names, a literal, a partition and a
//! caller (user, address, client id).
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use seckill_fuzz::checks::{check_limiter_key, KeyInput};

type Input<'a> = (
    &'a str,
    &'a str,
    &'a str,
    u8,
    bool,
    &'a str,
    i64,
    IpAddr,
    &'a [u8],
);

fuzz_target!(|input: Input| {
    let (policy, rule, literal, source, per_item, partition, user, peer, client_id) = input;
    check_limiter_key(&KeyInput {
        policy,
        rule,
        literal,
        source,
        per_item,
        partition,
        user,
        peer,
        client_id,
    });
});
