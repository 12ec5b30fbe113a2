//! `Idempotency-Key`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seckill_fuzz::checks::check_idempotency_key;

fuzz_target!(|value: &[u8]| check_idempotency_key(value));
