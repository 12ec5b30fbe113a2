//! The integration suite: one binary, one module per area. Every test starts the real
//! application on a random port against the real Redis and Postgres that
//! `scripts/services.sh` runs, with its own database and its own Redis key prefix:
//! `TestApp`, from the crate the test binaries share (`tests/support/`), where every
//! request a test sends is spelled once.

mod admin;
mod admin_input;
mod blocks;
mod chaos;
mod charts;
mod committer;
mod connections;
mod denial_cache;
mod errors;
mod hardening;
mod health;
mod history_fold;
mod history_stream;
mod identity;
mod item_admin;
mod key_sources;
mod life_cycle;
mod limiter_engine;
mod limiter_http;
mod limiter_model;
mod loadgen;
mod loadgen_room;
mod metrics;
mod nginx_gate;
mod offenders;
mod openapi;
mod operator_actions;
mod overload;
mod parsers;
mod policy_scope;
mod refusal_samples;
mod reports;
mod returns;
mod rls_decision;
mod rls_domains;
mod rls_grpc;
mod rule_sets;
mod sale;
mod slowloris;
mod waiting_room;
