//! `data.inputs`: model inputs from files of their own, read whole, one row per sample in
//! the data's order, every value a finite number; scaled (on request) with the training
//! split's statistics.

use super::{data_error, first_index, scale_on, Dataset};
use crate::arrays;
use manifests::{Diagnostic, FormatKind, InputSpec, Manifest};
use pipeline_core::fingerprint::input_role;
use pipeline_core::freshness::regular_input;
use pipeline_core::table::{Layout, TableError};
use std::path::Path;
use tch::{Kind, Tensor};

/// One input's values as read: samples × its sample shape, float32.
fn read(manifest: &Manifest, input: &InputSpec, path: &Path) -> Result<Tensor, Diagnostic> {
    let spec = &manifest.data;
    let failed = |message: String| {
        Diagnostic::error(
            "pipeline::data::bad_input",
            format!("the input `{}`: {}: {message}", input.name, path.display()),
        )
        .label_opt(input.source.span, "this file")
    };
    let table = || {
        let layout = Layout::Features(&input.features);
        pipeline_core::formats::table(input.format)
            .map_err(TableError::Io)
            .and_then(|code| code.read(path, &spec.dialect, layout))
            .and_then(|t| match t.categorical.first() {
                // Categories are the data file's (`data.categorical`).
                Some(c) => Err(TableError::Columns(format!(
                    "column `{}` holds text (`{}`); an input's columns are numbers: read categories from the data file",
                    c.name,
                    c.values[0]
                ))),
                None => {
                    let rows = t.rows() as i64;
                    Ok(Tensor::from_slice(&t.features)
                        .reshape([rows, t.feature_names.len() as i64]))
                }
            })
            .map_err(|e| {
                let message = match e {
                    TableError::Line { line, message } if input.format.is_text_table() => {
                        format!("line {line}: {message}")
                    }
                    TableError::Line { line, message } => format!("row {line}: {message}"),
                    TableError::Io(m) | TableError::Columns(m) => m,
                };
                failed(message).help("the columns must be numbers; `features` chooses them")
            })
    };
    let array = |r: Result<Vec<Tensor>, String>| {
        r.map(|mut a| a.pop().expect("one array asked for"))
            .map_err(|e| failed(e).help("store one array, one row per sample"))
    };
    let name = match input.features.as_slice() {
        [manifests::Column::Name(name)] => name.as_str(),
        _ => "x",
    };
    let values = match input.format.kind() {
        FormatKind::Table { .. } => table()?,
        FormatKind::Array => arrays::read_npy(path)
            .map_err(|e| failed(e).help("store one array, one row per sample"))?,
        FormatKind::Arrays => array(arrays::read_named(input.format, path, &[name]))?,
        FormatKind::Samples => super::read::read_samples(input.format, path)
            .map(|(features, _)| features)
            .map_err(|e| failed(e).help("check the file: its format's code could not read it"))?,
        FormatKind::Images { .. } => {
            unreachable!("lowering refuses images as an input")
        }
    };
    Ok(values.to_kind(Kind::Float))
}

impl Dataset {
    /// Reads every `data.inputs` file for the data's `samples` rows (before any row is
    /// dropped), each checked for its length and for values that are not finite.
    pub(super) fn read_extra_inputs(
        &mut self,
        manifest: &Manifest,
        samples: usize,
    ) -> Result<(), Diagnostic> {
        for input in &manifest.data.extra_inputs {
            let path = manifest.resolve(&input.source.value);
            regular_input(manifest, &input_role(&input.name), &path, None)?;
            let values = read(manifest, input, &path)?;
            let rows = values.size().first().copied().unwrap_or(0);
            if values.dim() < 2 || rows as usize != samples || values.size()[1..].contains(&0) {
                return Err(data_error(
                    "pipeline::data::bad_shape",
                    &manifest.data,
                    format!(
                        "the input `{}` ({}) has shape {:?}, for {samples} samples of data",
                        input.name,
                        path.display(),
                        values.size()
                    ),
                    "an input holds one row per sample of the data, in the same order",
                )
                .label_opt(input.source.span, "this input"));
            }
            let bad = values
                .isfinite()
                .logical_not()
                .flatten(1, -1)
                .any_dim(1, false);
            if let Some(i) = first_index(&bad) {
                return Err(data_error(
                    "pipeline::data::not_finite",
                    &manifest.data,
                    format!(
                        "the input `{}` ({}), sample {i}: a value is missing or not finite",
                        input.name,
                        path.display()
                    ),
                    "every value of an input must be a finite number",
                )
                .label_opt(input.source.span, "this input"));
            }
            self.extra.push(values);
        }
        Ok(())
    }

    /// Every `data.inputs` input that a layer reads as its padding mask marks a real step
    /// in every sample, and is not scaled (which would move its zeros): else attention
    /// and pooling would read nothing, and give NaN.
    pub fn check_extra_masks(&self, manifest: &Manifest) -> Result<(), Diagnostic> {
        let masks: Vec<(&str, Option<miette::SourceSpan>)> = manifest
            .model
            .layers()
            .into_iter()
            .filter_map(|l| Some((l.layer.mask()?, l.span)))
            .collect();
        for (input, values) in manifest.data.extra_inputs.iter().zip(&self.extra) {
            let Some(&(_, layer)) = masks.iter().find(|(name, _)| *name == input.name) else {
                continue;
            };
            let error = |message: String, help: &str| {
                data_error("pipeline::data::bad_mask", &manifest.data, message, help)
                    .label_opt(input.source.span, "this input")
                    .label_opt(layer, "read as a mask here")
            };
            if input.scale != manifests::Scale::None {
                return Err(error(
                    format!(
                        "the input `{}` is a padding mask: it cannot be scaled",
                        input.name
                    ),
                    "remove its `scale`: a mask is 0 for padding and anything else for a real step",
                ));
            }
            let empty = values
                .ne(0.0)
                .flatten(1, -1)
                .any_dim(1, false)
                .logical_not();
            if let Some(i) = first_index(&empty) {
                return Err(error(
                    format!(
                        "the input `{}`, sample {i}: every step is padding (0), so a mask leaves nothing to read",
                        input.name
                    ),
                    "a sequence needs one real step at least: leave such samples out, or fix the mask",
                ));
            }
        }
        Ok(())
    }

    /// Scales each input as its `scale` says, with the training split's statistics.
    pub(super) fn scale_extra_inputs(&mut self, manifest: &Manifest) {
        for (input, values) in manifest.data.extra_inputs.iter().zip(&mut self.extra) {
            if let Some(scaling) = scale_on(values, &self.splits.train, input.scale) {
                self.extra_scaling.push((input.name.clone(), scaling));
            }
        }
    }
}
