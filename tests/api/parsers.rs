//! Property tests of the request parsers over arbitrary bytes: the invariants of
//! `parsers/checks.rs` (no panic; refusals are documented 4xx; key parts inside their
//! alphabet and length), which the fuzz targets in `fuzz/` hold them to as well. The
//! inputs lean towards what gets past the first byte: header-legal bytes, near-valid
//! names, JSON made of the routes' own field names.

pub mod checks;

use proptest::prelude::*;
use proptest::string::bytes_regex;

use self::checks::KeyInput;

/// Bytes as a header value may carry them (visible ASCII, tabs, obs-text), now and then
/// a byte no header may hold.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        8 => 0x20u8..0x7f,
        2 => 0x80u8..=0xff,
        1 => Just(b'\t'),
        1 => any::<u8>(),
    ];
    prop::collection::vec(byte, 0..80)
}

/// Header bytes, or text near an alphabet (`pattern`) and its length limit.
fn near(pattern: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let near = bytes_regex(pattern).expect("a valid pattern");
    prop_oneof![header_bytes(), near]
}

/// JSON made of the routes' own field names and every kind of value.
fn json_text() -> impl Strategy<Value = Vec<u8>> {
    let name = prop::sample::select(vec![
        "itemId",
        "userId",
        "name",
        "priceCents",
        "stock",
        "startsAt",
        "endsAt",
        "version",
        "algorithm",
        "enabled",
        "scope",
        "rules",
        "windowMs",
        "threshold",
        "message",
        "x",
    ]);
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        (-5i64..5).prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "[a-z_:0-9 -]{0,12}".prop_map(serde_json::Value::from),
        Just(serde_json::Value::from("2026-11-30T10:00:00Z")),
        Just(serde_json::Value::from("token_bucket")),
    ];
    let value = leaf.prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(name.clone().prop_map(String::from), inner, 0..6)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    });
    value.prop_map(|value| value.to_string().into_bytes())
}

/// An `X-Forwarded-For` line: addresses, near-addresses and words, comma-separated.
fn forwarded_hops() -> impl Strategy<Value = Vec<u8>> {
    near("(?s-u)(([0-9.]{1,15}|[0-9a-f:]{2,39}|[a-z ]{0,5}), ?){0,4}")
}

fn content_type() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => Just(b"application/json".to_vec()),
        1 => Just(b"application/problem+json; charset=utf-8".to_vec()),
        1 => Just(b"text/plain".to_vec()),
        1 => header_bytes(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        // A failure prints its smallest input; nothing is written beside the tests.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn json_bodies_are_refused_with_documented_codes(
        which in any::<u8>(),
        content_type in content_type(),
        body in prop_oneof![
            8 => json_text(),
            8 => header_bytes(),
            // Around the 16 KiB limit.
            1 => (16_380usize..16_400).prop_map(|len| vec![b' '; len]),
        ],
    ) {
        checks::check_json_body(which, &content_type, &body);
    }

    #[test]
    fn bearer_tokens_are_a_shopper_or_a_401(value in prop_oneof![
        header_bytes(),
        bytes_regex("(?s-u)(Bearer|bearer|Basic) [A-Za-z0-9_.=-]{0,60}").expect("a pattern"),
    ]) {
        checks::check_authorization(&value);
    }

    #[test]
    fn signed_claims_make_a_shopper_only_of_a_canonical_sub(
        payload in prop_oneof![
            header_bytes(),
            (
                prop_oneof![
                    "[1-9][0-9]{0,18}",
                    "[0-9+ -]{0,21}",
                    "[a-z]{0,4}",
                ],
                prop_oneof![Just(4_102_444_800i64), any::<i64>()],
            ).prop_map(|(sub, exp)| {
                serde_json::json!({ "sub": sub, "exp": exp, "iat": 0 }).to_string().into_bytes()
            }),
        ],
    ) {
        checks::check_signed_claims(&payload);
    }

    #[test]
    fn user_ids_parse_only_in_canonical_form(text in near("(?s-u)[0-9+-]{0,21}")) {
        checks::check_user_id(&text);
    }

    #[test]
    fn forwarded_addresses_are_the_peer_or_a_named_hop(
        peer in prop_oneof![Just(checks::PROXIES[0]), any::<std::net::IpAddr>()],
        lines in prop::collection::vec(
            forwarded_hops(),
            0..3,
        ),
    ) {
        let lines: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        checks::check_forwarded_for(peer, &lines);
    }

    #[test]
    fn a_proxy_appended_address_is_the_client_whatever_the_client_wrote(
        client_written in forwarded_hops(),
        seen in any::<std::net::IpAddr>(),
    ) {
        checks::check_forwarded_by_proxy(&client_written, seen);
    }

    #[test]
    fn client_ids_are_believed_only_from_a_proxy_and_bounded(
        value in near("(?s-u)[A-Za-z0-9._:{}/ -]{0,70}"),
        from_proxy in any::<bool>(),
    ) {
        checks::check_client_id(&value, from_proxy);
    }

    #[test]
    fn idempotency_keys_are_a_400_or_bounded(value in near("(?s-u)[A-Za-z0-9_:{} -]{0,70}")) {
        checks::check_idempotency_key(&value);
    }

    #[test]
    fn limiter_keys_keep_their_hash_tag_and_alphabet(
        policy in "[a-z_{}: -]{0,34}",
        rule in "[a-z_{}: -]{0,34}",
        literal in "[A-Za-z0-9._:{} -]{0,66}",
        source in any::<u8>(),
        per_item in any::<bool>(),
        partition in "[A-Za-z0-9._:{} -]{0,66}",
        user in prop_oneof![any::<i64>(), 1i64..100],
        peer in any::<std::net::IpAddr>(),
        client_id in near("(?s-u)[A-Za-z0-9._:{}/ -]{0,70}"),
    ) {
        checks::check_limiter_key(&KeyInput {
            policy: &policy,
            rule: &rule,
            literal: &literal,
            source,
            per_item,
            partition: &partition,
            user,
            peer,
            client_id: &client_id,
        });
    }
}
