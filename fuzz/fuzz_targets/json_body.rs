//! `JsonBody` over each route's body: content type, size, syntax, types and rules.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seckill_fuzz::checks::check_json_body;

fuzz_target!(|input: (u8, &[u8], &[u8])| {
    let (which, content_type, body) = input;
    check_json_body(which, content_type, body);
});
