//! The connection guard against a slowloris: one client address holds at most its share
//! of connections, a request head trickled in a byte at a time is cut at its deadline
//! (the first one on a connection and every later one), and the probes have a listener
//! of their own. A small, bounded attack on loopback; `make soak` runs the heavy one.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use seckill_test_support::{eventually, spawn_app_with, TestApp};

/// A connection from `source` (a loopback address other than the trusted 127.0.0.1).
async fn connect_from(source: &str, app: &TestApp) -> std::io::Result<TcpStream> {
    let target: SocketAddr = app.address.trim_start_matches("http://").parse().unwrap();
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{source}:0").parse().unwrap())?;
    socket.connect(target).await
}

/// Trickles a request head that never ends, a byte every `every`, until the server
/// closes the connection (answers `Some(time it stayed open)`) or `give_up` passes.
/// `GET /health/live` on a connection of its own from `source`: the whole answer,
/// which must come within `within`.
async fn live_from(source: &str, app: &TestApp, within: Duration) -> String {
    let mut stream = connect_from(source, app).await.expect("connects");
    stream
        .write_all(b"GET /health/live HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .expect("sends");
    let mut answer = String::new();
    tokio::time::timeout(within, stream.read_to_string(&mut answer))
        .await
        .expect("another address is answered in time")
        .expect("reads");
    answer
}

async fn trickle(mut stream: TcpStream, every: Duration, give_up: Duration) -> Option<Duration> {
    let opened = Instant::now();
    let head =
        b"GET /health/live HTTP/1.1\r\nHost: test\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut buffer = [0u8; 256];
    for byte in head.iter().cycle() {
        if opened.elapsed() > give_up {
            return None;
        }
        if stream.write_all(&[*byte]).await.is_err() {
            return Some(opened.elapsed());
        }
        // A closed connection reads as end of stream (or the 408 actix sends first).
        match tokio::time::timeout(every, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(opened.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => {}
        }
    }
    None
}

fn guarded(s: &mut seckill::configuration::Settings) {
    s.workers = Some(2);
    s.max_connections = 32;
    s.max_connections_per_address = 8;
    s.head_timeout_ms = 1_000;
}

#[sqlx::test]
async fn one_address_holds_only_its_share_and_everyone_else_is_served(db: PgPool) {
    let app = spawn_app_with(&db, guarded).await;
    // The attacker: 200 connections from 127.0.0.2, each trickling a head that never
    // ends, reopened as soon as one closes, for three seconds. Without the guard they
    // would hold all 64 places of the two workers.
    let attack_until = Instant::now() + Duration::from_secs(3);
    let attackers = (0..200).map(|_| {
        let app = &app;
        async move {
            while Instant::now() < attack_until {
                if let Ok(stream) = connect_from("127.0.0.2", app).await {
                    let left = attack_until.saturating_duration_since(Instant::now());
                    trickle(stream, Duration::from_millis(100), left).await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    // Everyone else, meanwhile: a shopper behind the trusted proxy, another client
    // address, and the probes on their own listener, each answered as usual.
    let others = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let token = app.token_for(1).await;
        let item = app.open_item(10).await;
        let purchase = app.post_seckill(&token, item, "10.80.0.1").await;
        assert_eq!(purchase.status(), 200, "a purchase through the proxy");
        let mut answers = Vec::new();
        while Instant::now() < attack_until {
            let answer = live_from("127.0.0.3", &app, Duration::from_secs(2)).await;
            answers.push(answer.starts_with("HTTP/1.1 200"));
            let probe = app
                .client
                .get(format!("{}/health/live", app.probe_address))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .expect("the probe listener answers");
            assert_eq!(probe.status(), 200);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        answers
    };
    let (_, answers) = tokio::join!(futures_util::future::join_all(attackers), others);
    assert!(
        !answers.is_empty() && answers.iter().all(|ok| *ok),
        "{answers:?}"
    );
    let cut = |reason: &str| {
        let app = &app;
        let prefix = format!("seckill_connections_cut_total{{reason=\"{reason}\"}}");
        async move { app.metric_sum(&prefix).await }
    };
    assert!(
        cut("per_address").await > 0.0,
        "the attacker was refused connections"
    );
    assert!(cut("head_timeout").await > 0.0, "trickled heads were cut");
}

/// However steadily the bytes come, a head must be complete within `head_timeout_ms`:
/// the first on a connection, and a later one on a kept-alive connection too (actix's
/// own deadline covers only the first).
#[sqlx::test]
async fn a_head_trickled_in_is_cut_at_its_deadline_on_a_kept_alive_connection_too(db: PgPool) {
    let app = spawn_app_with(&db, guarded).await;
    let first = connect_from("127.0.0.4", &app).await.unwrap();
    let open_for = trickle(first, Duration::from_millis(100), Duration::from_secs(10))
        .await
        .expect("the first head is cut");
    assert!(
        open_for >= Duration::from_millis(900),
        "cut at {open_for:?}, before its deadline"
    );

    let mut kept = connect_from("127.0.0.4", &app).await.unwrap();
    kept.write_all(b"GET /health/live HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 512];
    let read = kept.read(&mut buffer).await.unwrap();
    assert!(String::from_utf8_lossy(&buffer[..read]).starts_with("HTTP/1.1 200"));
    let open_for = trickle(kept, Duration::from_millis(100), Duration::from_secs(10))
        .await
        .expect("the second head is cut");
    assert!(
        open_for >= Duration::from_millis(900),
        "cut at {open_for:?}, before its deadline"
    );

    // Both are the guard's cuts (actix's own first-request deadline comes later).
    eventually("both cuts counted", Duration::from_secs(5), || async {
        let cut = app
            .metric_sum("seckill_connections_cut_total{reason=\"head_timeout\"}")
            .await;
        (cut == 2.0).then_some(())
    })
    .await;
}

/// `seckill_connections_cut_total{reason}` read from the probe listener, so that reading
/// it opens no connection on the service's.
async fn cuts(app: &TestApp, reason: &str) -> f64 {
    let prefix = format!("seckill_connections_cut_total{{reason=\"{reason}\"}}");
    let text = app
        .client
        .get(format!("{}/metrics", app.probe_address))
        .send()
        .await
        .expect("the probe listener answers")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .filter(|line| line.starts_with(&prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Whether the server has closed `stream`: end of stream or a reset, without waiting.
fn closed(stream: &TcpStream) -> bool {
    let mut buffer = [0u8; 64];
    match stream.try_read(&mut buffer) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// A botnet's slowloris: many addresses, each well under its share, together holding
/// every place with connections that never send a head. The connections waiting for a
/// head have a budget below the worker's cap, so a newcomer is still accepted, and the
/// one that has waited longest is closed to make room.
#[sqlx::test]
async fn idle_connections_from_many_addresses_give_way_oldest_first_to_a_newcomer(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        // One worker, so connections are taken up in the order they were opened.
        s.workers = Some(1);
        s.max_connections = 8;
        s.max_connections_awaiting_head = 6;
        s.max_connections_per_address = 4;
        // Beyond the test: no head deadline cuts anything here.
        s.head_timeout_ms = 120_000;
    })
    .await;
    // 12 connections, 4 from each of 127.0.2.1-3, opened one after another; the first
    // is kept alive after one request, the others never send a byte. From the seventh
    // on, each newcomer closes the oldest still waiting.
    let mut idle = Vec::new();
    for n in 0..12u32 {
        let source = format!("127.0.2.{}", n / 4 + 1);
        let mut stream = connect_from(&source, &app).await.expect("connects");
        if n == 0 {
            stream
                .write_all(b"GET /health/live HTTP/1.1\r\nHost: test\r\n\r\n")
                .await
                .unwrap();
            let mut buffer = [0u8; 512];
            let read = stream.read(&mut buffer).await.unwrap();
            assert!(String::from_utf8_lossy(&buffer[..read]).starts_with("HTTP/1.1 200"));
        }
        idle.push(stream);
        let expected = f64::from(n.saturating_sub(5));
        eventually(
            "the oldest waiting cut",
            Duration::from_secs(10),
            || async { (cuts(&app, "head_budget").await == expected).then_some(()) },
        )
        .await;
    }
    // Someone else, from another address, is served (all 8 places were held before).
    let answer = live_from("127.0.0.3", &app, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Exactly the seven oldest were closed (six for the idle newcomers, one for it).
    assert_eq!(cuts(&app, "head_budget").await, 7.0);
    for (n, stream) in idle.iter().enumerate().take(7) {
        eventually(
            &format!("idle connection {n} closed"),
            Duration::from_secs(5),
            || async { closed(stream).then_some(()) },
        )
        .await;
    }
    let open: Vec<bool> = idle[7..].iter().map(|s| !closed(s)).collect();
    assert_eq!(open, vec![true; 5], "the five newest are still open");
}
