//! The `seckill` binary: settings, telemetry, application, run. Nothing else.

use seckill::configuration::Settings;
use seckill::startup::Application;
use seckill::telemetry;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::load()?;
    telemetry::init(&settings);
    let application = Application::build(settings).await?;
    application.run_until_stopped().await?;
    Ok(())
}
