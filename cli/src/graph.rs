//! `pipeline graph FILE`: the stage DAG as DOT or Mermaid.

use crate::cli::Format;
use crate::load::Loaded;
use manifests::Override;
use pipeline_core::plan::GraphFormat;
use pipeline_core::Plan;
use std::path::Path;

pub fn run(file: &Path, overrides: &[Override], format: Format) -> bool {
    let loaded = Loaded::read(file, overrides);
    let Some(manifest) = loaded.report() else {
        return false;
    };
    let format = match format {
        Format::Dot => GraphFormat::Dot,
        Format::Mermaid => GraphFormat::Mermaid,
    };
    // Stage names are the user's: their control characters are shown escaped.
    let graph = Plan::new(manifest).render(manifest, format);
    print!("{}", manifests::escape_controls(&graph));
    true
}
