//! Applying a model to another file: a `predict` stage, and the predictions an `eval`
//! stage writes (`crate::predict` computes and writes them).

use super::{append, Context, Produced};
use crate::data::Dataset;
use crate::error::torch_error;
use crate::observer::Observer;
use crate::predict;
use manifests::{DataFormat, Diagnostic, InputFile, PredictSpec, PredictionFormat, Spanned};
use pipeline_core::freshness::StageState;
use pipeline_core::stages::predictions_output;
use pipeline_core::table::TableError;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

impl Context<'_> {
    /// Another file's samples (an `eval`'s or a `predict`'s `source`), as the training
    /// data's, on the device.
    pub(super) fn other_data(
        &self,
        file: &Spanned<PathBuf>,
        skip_rows: u64,
        inputs: &[InputFile],
        labelled: bool,
        obs: &mut dyn Observer,
    ) -> Result<Dataset, Diagnostic> {
        let session = &self.session;
        let mut data = Dataset::load_other(
            session.manifest,
            file,
            skip_rows,
            inputs,
            &session.data,
            labelled,
        )?;
        super::unseen_categories(
            &data,
            &session.manifest.resolve(&file.value).display().to_string(),
            obs,
        );
        if labelled && session.manifest.loss.kind.is_classification() {
            if let Err((i, label)) = data.check_classes(session.outputs) {
                return Err(Diagnostic::error(
                    "pipeline::data::label_out_of_range",
                    format!(
                        "{}: label {label} is out of range for the model's {} outputs",
                        data.at(i),
                        session.outputs
                    ),
                )
                .label_opt(file.span, "labels from here")
                .help("evaluate on samples of the classes the model was trained on"));
            }
        }
        data.to_device(session.device);
        Ok(data)
    }

    /// A `predict` stage: the model of `train` stage `source` applied to the samples of
    /// its `source`, the predictions written where it says (and for the cache).
    pub(super) fn predict(
        &mut self,
        state: &StageState,
        spec: &PredictSpec,
        source: Option<usize>,
        scratch: &Path,
        obs: &mut dyn Observer,
    ) -> Result<Produced, Diagnostic> {
        // Rank 0 alone writes files.
        if self.session.rank() != 0 {
            return Ok(Produced::metrics(BTreeMap::new(), Vec::new()));
        }
        let source = source.expect("check ensures a predict stage needs a train stage");
        let manifest = self.session.manifest;
        let stage = &manifest.stages[state.index];
        let data = self.other_data(&spec.source, spec.skip_rows, &spec.inputs, false, obs)?;
        self.model_of(source, spec.from.value)?;
        let model = &self.trained[&(source, spec.from.value)].model;
        let session = &self.session;
        let samples = &data.splits.test;
        let predictions = predict::predict(
            model,
            &session.numerics,
            &session.loss,
            &data,
            samples,
            spec.batch_size as i64,
        )
        .map_err(|e| {
            torch_error(
                "pipeline::predict::failed",
                &format!("stage `{}`", stage.name()),
                &e,
            )
            .label_opt(stage.name.span, "this prediction")
        })?;
        let id = match (&spec.id, &data.images) {
            (Some(id), _) => Some(self.ids(spec, id, &predictions.rows)?),
            // An image is named by its path under the source directory.
            (None, Some(set)) => Some((
                "file".to_string(),
                predictions
                    .rows
                    .iter()
                    .map(|&i| set.listing.files[i].to_string_lossy().into_owned())
                    .collect(),
            )),
            (None, None) => None,
        };
        let (written, path) = self.write_predictions(
            state.index,
            &spec.output,
            spec.format,
            &predictions,
            id,
            scratch,
        )?;
        let samples = samples.len();
        append(
            &mut self.log,
            &json!({"record": "predict", "stage": stage.name(), "source": spec.source.value, "samples": samples, "output": path}),
        )?;
        let store = vec![(predictions_output(spec.format).to_string(), written)];
        Ok(Produced::metrics(
            BTreeMap::from([("samples".to_string(), samples as f64)]),
            store,
        ))
    }

    /// Writes the predictions of stage `index` in `scratch`, to be stored and then copied
    /// to its `output`, or else to `<name>.<format>` in the run directory: the file
    /// written, and where it will be (checked first: a refused path costs no work).
    pub(super) fn write_predictions(
        &self,
        index: usize,
        output: &Option<Spanned<PathBuf>>,
        format: PredictionFormat,
        predictions: &predict::Predictions,
        id: Option<(String, Vec<String>)>,
        scratch: &Path,
    ) -> Result<(PathBuf, PathBuf), Diagnostic> {
        let manifest = self.session.manifest;
        let kind = &manifest.loss.kind;
        let training = &self.session.data;
        let class = |k: usize| match training.classes.as_ref().and_then(|c| c.get(k)) {
            Some(name) => name.clone(),
            None => k.to_string(),
        };
        let names = predict::Names {
            labels: training.label_columns(kind.is_classification(), predictions.width),
            classes: match kind.is_classification() {
                true => (0..predictions.width).map(class).collect(),
                false => Vec::new(),
            },
            id,
        };
        let path = self.output_path(index, output.as_ref(), format.as_str())?;
        let written = scratch.join(predictions_output(format));
        predict::write(&written, format, kind.target(), predictions, &names)?;
        Ok((written, path))
    }

    /// The cells of the source's column `id` for the data rows `rows` (empty where
    /// missing), and the column's name.
    fn ids(
        &self,
        spec: &PredictSpec,
        id: &Spanned<String>,
        rows: &[usize],
    ) -> Result<(String, Vec<String>), Diagnostic> {
        let manifest = self.session.manifest;
        let path = manifest.resolve(&spec.source.value);
        let format = DataFormat::of_name(&spec.source.value).unwrap_or(manifest.data.format);
        let dialect = manifests::Dialect {
            skip_rows: spec.skip_rows,
            ..manifest.data.dialect.clone()
        };
        let cells =
            pipeline_core::table::read_column(&path, format, &dialect, &id.value).map_err(|e| {
                let why = match e {
                    TableError::Io(m) | TableError::Columns(m) => m,
                    TableError::Line { line, message } => format!("line {line}: {message}"),
                };
                Diagnostic::error(
                    "pipeline::predict::bad_id",
                    format!("{}: cannot read the `id` column: {why}", path.display()),
                )
                .label_opt(id.span, "copied from the source")
                .help("`id` names a column of the source by its header's name")
            })?;
        let of = |row: usize| cells.get(row).cloned().flatten().unwrap_or_default();
        Ok((id.value.clone(), rows.iter().map(|&r| of(r)).collect()))
    }
}
