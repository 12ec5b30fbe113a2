//! The `seckill` binary: settings, telemetry, application, run. Nothing else.

use seckill::configuration::Settings;
use seckill::startup::Application;
use seckill::telemetry;

/// The request path allocates small, short-lived buffers on two threads at once; glibc
/// malloc spent ~10 % of the refusal path's CPU on them (see docs/performance.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    // With the `failpoints` feature, `FAILPOINTS=name=action;…` turns fault points on
    // for a whole process (the chaos tests); without it this compiles to nothing.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let settings = Settings::load()?;
    telemetry::init(&settings);
    let application = Application::build(settings).await?;
    application.run_until_stopped().await?;
    Ok(())
}
