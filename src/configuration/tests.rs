//! Settings: defaults, secrets in `Debug`, production safety, timeouts; the app's
//! policies: valid, and keyed as documented.

use secrecy::SecretString;

use super::policies::{
    self, ADMIN_AUTH_POLICY, LIMITED_POLICY, ORDERS_READ_POLICY, SECKILL_POLICY,
};
use super::*;
use crate::domain::{ClientId, ClientIp, UserId};
use crate::limiter::keys::{redis_key, ClientKey};
use crate::limiter::policy::{Algorithm, FailMode, Policy, PolicyError, PolicySet};
use crate::limiter::{Caller, Rejection};

#[test]
fn debug_output_never_shows_secrets() {
    let settings = Settings {
        jwt_secret: SecretString::from("jwt-very-secret"),
        admin_token: SecretString::from("admin-very-secret"),
        database_url: SecretString::from("postgres://u:db-very-secret@h/d"),
        ..Settings::default()
    };
    let dump = format!("{settings:?}");
    for secret in ["jwt-very-secret", "admin-very-secret", "db-very-secret"] {
        assert!(!dump.contains(secret), "{secret} leaked into {dump}");
    }
}

fn production() -> Settings {
    Settings {
        environment: Environment::Production,
        jwt_secret: SecretString::from("a-production-secret-of-at-least-32-bytes"),
        queue_secret: SecretString::from("a-production-queue-key-of-at-least-32-bytes"),
        admin_token: SecretString::from("ops:a-long-random-admin-token-of-32-chars"),
        ..Settings::default()
    }
}

#[test]
fn production_refuses_a_short_admin_secret_and_names_the_setting() {
    for weak in [
        "ops:x",
        "x",
        "ops:a-long-random-admin-token-of-32",
        "ops:x,ci:short",
    ] {
        let settings = Settings {
            admin_token: SecretString::from(weak),
            ..production()
        };
        let refusal =
            safety::production(&settings).expect_err("a secret under 32 characters is refused");
        assert_eq!(refusal.setting, "SECKILL_ADMIN_TOKEN", "{weak}");
    }
    let strong = Settings {
        admin_token: SecretString::from(
            "ops:0123456789abcdef0123456789abcdef,ci:fedcba9876543210fedcba9876543210",
        ),
        ..production()
    };
    assert_eq!(safety::production(&strong), Ok(()));
}

#[test]
fn the_reservation_deadline_must_outlast_every_order_transaction() {
    assert!(safety::timeouts(&Settings::default()).is_ok());
    let tight = Settings {
        reservation_deadline_ms: 20_500,
        ..Settings::default()
    };
    let refusal = safety::timeouts(&tight).unwrap_err().to_string();
    assert!(
        refusal.contains("reservation_deadline_ms (20500)"),
        "{refusal}"
    );
    let just_above = Settings {
        reservation_deadline_ms: 20_501,
        ..Settings::default()
    };
    assert!(safety::timeouts(&just_above).is_ok());
}

#[test]
fn production_refuses_each_unsafe_setting_and_names_it() {
    assert_eq!(safety::production(&production()), Ok(()));
    let refused = |s: Settings| safety::production(&s).unwrap_err().setting;
    assert_eq!(
        refused(Settings {
            dev_login: Some(true),
            ..production()
        }),
        "SECKILL_DEV_LOGIN"
    );
    assert_eq!(
        refused(Settings {
            jwt_secret: SecretString::from("short"),
            ..production()
        }),
        "SECKILL_JWT_SECRET"
    );
    assert_eq!(
        refused(Settings {
            jwt_secret: SecretString::from(LOCAL_JWT_SECRET),
            ..production()
        }),
        "SECKILL_JWT_SECRET"
    );
    for queue in [
        "short",
        LOCAL_QUEUE_SECRET,
        "a-production-secret-of-at-least-32-bytes",
    ] {
        assert_eq!(
            refused(Settings {
                queue_secret: SecretString::from(queue),
                ..production()
            }),
            "SECKILL_QUEUE_SECRET",
            "{queue}"
        );
    }
    assert_eq!(
        refused(Settings {
            admin_token: SecretString::from(""),
            ..production()
        }),
        "SECKILL_ADMIN_TOKEN"
    );
    assert_eq!(
        refused(Settings {
            admin_token: SecretString::from("dev-admin-token"),
            ..production()
        }),
        "SECKILL_ADMIN_TOKEN"
    );
    assert_eq!(
        refused(Settings {
            admin_token: SecretString::from("ops:dev-admin-token"),
            ..production()
        }),
        "SECKILL_ADMIN_TOKEN"
    );
    // The same settings are fine on a laptop.
    assert_eq!(
        safety::production(&Settings {
            dev_login: Some(true),
            ..Settings::default()
        }),
        Ok(())
    );
}

#[test]
fn dev_login_follows_the_environment_unless_set() {
    let local = Settings::default();
    assert!(local.dev_login_enabled());
    let production = Settings {
        environment: Environment::Production,
        ..Settings::default()
    };
    assert!(!production.dev_login_enabled());
    let forced = Settings {
        dev_login: Some(false),
        ..Settings::default()
    };
    assert!(!forced.dev_login_enabled());
}

#[test]
fn the_default_policies_are_valid() {
    let set = PolicySet::parse(&policies::defaults()).unwrap();
    let seckill = set.get(SECKILL_POLICY).unwrap();
    let names: Vec<_> = seckill.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["api", "user", "ip"]);
    assert_eq!(seckill.fail_mode, FailMode::Closed);
    // Limits that protect (the lockout) or promise (the others) keep holding in
    // process while Redis is away; the sale cannot sell without Redis anyway.
    for name in [LIMITED_POLICY, ORDERS_READ_POLICY, ADMIN_AUTH_POLICY] {
        assert_eq!(set.get(name).unwrap().fail_mode, FailMode::Local, "{name}");
    }
}

#[test]
fn zero_windows_bad_names_and_duplicates_are_refused() {
    let mut config = policies::defaults()[SECKILL_POLICY].clone();
    config.rules[1].window_ms = 0;
    assert_eq!(
        Policy::parse("seckill", &config),
        Err(PolicyError::NotPositive {
            rule: "user".into(),
            field: "windowMs"
        })
    );
    let mut config = policies::defaults()[SECKILL_POLICY].clone();
    config.rules[2].name = "user".into();
    assert!(matches!(
        Policy::parse("seckill", &config),
        Err(PolicyError::DuplicateRule { .. })
    ));
    assert!(matches!(
        Policy::parse("Sec{kill}", &config),
        Err(PolicyError::BadPolicyName(_))
    ));
}

#[test]
fn token_bucket_parameters_default_from_the_window() {
    let set = PolicySet::parse(&policies::defaults()).unwrap();
    let rule = &set.get(LIMITED_POLICY).unwrap().rules[0];
    assert_eq!(
        (rule.capacity, rule.refill_tokens, rule.refill_ms),
        (100, 100, 60_000)
    );
    assert_eq!(rule.quota(Algorithm::TokenBucket), (100, 60));
    assert_eq!(rule.quota(Algorithm::SlidingWindow), (100, 60));
}

#[test]
fn keys_follow_the_documented_scheme() {
    let set = PolicySet::parse(&policies::defaults()).unwrap();
    let seckill = set.get(SECKILL_POLICY).unwrap();
    let caller = Caller {
        user: Some(UserId::try_from(42).unwrap()),
        ip: ClientIp::new("10.0.0.7".parse().unwrap()),
        client_id: None,
        route: "/seckill".into(),
        partition: None,
    };
    let keys: Vec<_> = seckill
        .rules
        .iter()
        .map(|r| redis_key("p", seckill, Algorithm::SlidingWindow, r, &caller).unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "p:{seckill}:sliding_window:api:lit:purchase",
            "p:{seckill}:sliding_window:user:42",
            "p:{seckill}:sliding_window:ip:10.0.0.7",
        ]
    );
    let limited_policy = set.get(LIMITED_POLICY).unwrap();
    let limited = &limited_policy.rules[0];
    let id = ClientId::parse("alice").unwrap();
    let with_id = Caller {
        client_id: Some(ClientKey::Id(&id)),
        ..caller.clone()
    };
    assert_eq!(
        redis_key(
            "p",
            limited_policy,
            Algorithm::TokenBucket,
            limited,
            &with_id
        )
        .unwrap(),
        "p:{limited}:token_bucket:client:id:alice"
    );
    // `/api/limited`'s fallback is its guard's to choose; a caller without a client
    // (any other route's) is refused, not keyed on its address.
    let by_address = Caller {
        client_id: Some(ClientKey::Address),
        ..caller.clone()
    };
    assert_eq!(
        redis_key(
            "p",
            limited_policy,
            Algorithm::TokenBucket,
            limited,
            &by_address
        )
        .unwrap(),
        "p:{limited}:token_bucket:client:ip:10.0.0.7"
    );
    assert!(matches!(
        redis_key(
            "p",
            limited_policy,
            Algorithm::TokenBucket,
            limited,
            &caller
        ),
        Err(Rejection::Misconfigured(_))
    ));
    let anonymous = Caller {
        user: None,
        ..caller
    };
    assert!(matches!(
        redis_key(
            "p",
            seckill,
            Algorithm::SlidingWindow,
            &seckill.rules[1],
            &anonymous
        ),
        Err(Rejection::NeedsUser)
    ));
}

/// The one test that calls `Settings::load`, so the variables it sets are read by no other.
#[test]
fn a_limiter_section_without_policies_keeps_the_apps_and_a_policies_table_replaces_them() {
    let dir = std::env::temp_dir().join(format!("seckill-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("seckill.toml");
    std::env::set_var("SECKILL_CONFIG", &file);
    std::env::set_var("SECKILL_LIMITER__TIMEOUT_MS", "100");

    std::fs::write(&file, "[limiter]\ndenial_cache_slots = 7\n").unwrap();
    let settings = Settings::load().unwrap();
    assert_eq!(
        (
            settings.limiter.timeout_ms,
            settings.limiter.denial_cache_slots
        ),
        (100, 7)
    );
    assert_eq!(settings.limiter.policies, policies::defaults());

    std::fs::write(
        &file,
        "[limiter.policies.p]\nalgorithm = \"token_bucket\"\n\
         [[limiter.policies.p.rules]]\nname = \"r\"\nkey = \"user\"\nwindow_ms = 1000\n\
         threshold = 2\nmessage = \"no\"\n",
    )
    .unwrap();
    let settings = Settings::load().unwrap();
    let names: Vec<_> = settings.limiter.policies.keys().collect();
    assert_eq!(names, ["p"]);
    assert_eq!(
        settings.seed_policies().len(),
        policies::defaults().len() + 1
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
