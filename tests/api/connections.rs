//! Open connections are bounded per worker (`max_connections`): resident memory follows
//! them (docs/soak.md, "Memory"), and actix alone would hold 25 000 per worker.

use std::io::ErrorKind;
use std::time::Duration;

use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use seckill_test_support::spawn_app_with;

/// Sends one keep-alive request on `stream` and reads its answer's first bytes, or
/// gives up after `wait`.
async fn ask(stream: &mut TcpStream, wait: Duration) -> std::io::Result<String> {
    stream
        .write_all(b"GET /health/live HTTP/1.1\r\nHost: test\r\n\r\n")
        .await?;
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(wait, stream.read(&mut buffer))
        .await
        .map_err(|_| std::io::Error::new(ErrorKind::TimedOut, "no answer"))??;
    Ok(String::from_utf8_lossy(&buffer[..read]).into_owned())
}

#[sqlx::test]
async fn a_worker_serves_at_most_max_connections_and_the_next_waits_its_turn(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        s.workers = Some(1);
        s.max_connections = 2;
        // Two idle connections may wait for a head: the cap is what is held here, not
        // the budget of waiting ones (`slowloris.rs`).
        s.max_connections_awaiting_head = 2;
    })
    .await;
    let address = app.address.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(&address).await.expect("connects");
        let answer = ask(&mut stream, Duration::from_secs(5))
            .await
            .expect("served");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        held.push(stream);
    }
    // The kernel accepts the third connection, the app does not serve it while two
    // are open (keep-alive holds them for 5 s, far longer than this wait).
    let mut third = TcpStream::connect(&address).await.expect("connects");
    let waited = ask(&mut third, Duration::from_millis(700)).await;
    assert!(
        waited
            .as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::TimedOut),
        "a third connection was served while two were open: {waited:?}"
    );
    // One closes: the third is taken up and its request answered.
    drop(held.pop());
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), third.read(&mut buffer))
        .await
        .expect("answered once a connection closed")
        .expect("reads");
    let answer = String::from_utf8_lossy(&buffer[..read]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
