//! A user id as a token's `sub` carries it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seckill_fuzz::checks::check_user_id;

fuzz_target!(|text: &[u8]| check_user_id(text));
