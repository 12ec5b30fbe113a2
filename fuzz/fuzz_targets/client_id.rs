//! `X-Client-Id`, from a trusted proxy or from anyone.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seckill_fuzz::checks::check_client_id;

fuzz_target!(|input: (bool, &[u8])| {
    let (from_proxy, value) = input;
    check_client_id(value, from_proxy);
});
