//! `Authorization: Bearer <JWT>`: raw header bytes, or claims signed with the right key so
//! the fuzzer reaches the claims' parsing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seckill_fuzz::checks::{check_authorization, check_signed_claims};

fuzz_target!(|input: (bool, &[u8])| {
    match input {
        (false, header) => {
            check_authorization(header);
        }
        (true, claims) => check_signed_claims(claims),
    }
});
