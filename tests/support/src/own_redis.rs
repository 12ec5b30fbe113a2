//! A `redis-server` owned by one test.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::eventually;

/// A `redis-server` owned by one test, on a unix socket in a temporary folder, so the
/// test can stop and restart it without touching the Redis every other test shares.
pub struct OwnRedis {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl OwnRedis {
    pub async fn start() -> Self {
        let mut redis = Self {
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        };
        redis.restart().await;
        redis
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// Starts (again) on the same socket and waits until it answers PING.
    pub async fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--unixsocketperm",
                "700",
            ])
            .arg("--unixsocket")
            .arg(self.socket())
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/services.sh installs it)");
        self.child = Some(child);
        let url = self.url();
        eventually("own redis answers", Duration::from_secs(10), || {
            let url = url.clone();
            async move {
                let client = redis::Client::open(url).ok()?;
                let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .ok()
            }
        })
        .await;
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}
