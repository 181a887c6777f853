//! placeholder
use std::process::ExitCode;
#[derive(clap::Args, Debug)]
pub struct RenderArgs {}
pub fn render(_a: RenderArgs) -> ExitCode { ExitCode::from(3) }
pub fn crd() -> ExitCode { ExitCode::from(3) }
