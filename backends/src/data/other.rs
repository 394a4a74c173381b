//! Another file read as the data file is, for a trained model: an `eval` stage's
//! `source` (labelled) or a `predict` stage's (features alone). Its samples are all
//! used, in the file's order; its columns are the training's, matched by name when both
//! files have a header (other columns, an id, ignored) and by position otherwise; missing
//! values are filled and features scaled with the training split's statistics; text
//! labels become the training's class indices.

use super::{data_error, first_index, Dataset, Fit};
use manifests::{Column, DataFormat, DataSpec, Diagnostic, InputFile, Manifest, Missing, Spanned};
use pipeline_core::table::{peek_features, Layout};
use std::path::PathBuf;
use tch::{Kind, TchError, Tensor};

impl Dataset {
    /// The samples of `source` (below its first `skip_rows` lines) for a model trained on
    /// `training`: with their labels (`labelled`, an `eval`) or without (a `predict`).
    /// All of them are its `test` split, in the file's order. `check` has made sure the
    /// source's format suits the data (`pipeline_core::check`).
    pub fn load_other(
        manifest: &Manifest,
        source: &Spanned<PathBuf>,
        skip_rows: u64,
        inputs: &[InputFile],
        training: &Dataset,
        labelled: bool,
    ) -> Result<Dataset, Diagnostic> {
        let mut other = manifest.clone();
        let spec = &mut other.data;
        spec.source = source.clone();
        // `data.inputs` from the stage's files for these samples (`check` makes sure each
        // has one): never the training's, which hold the training's samples.
        for input in &mut spec.extra_inputs {
            let Some(file) = inputs.iter().find(|i| i.name.value == input.name) else {
                return Err(data_error(
                    "pipeline::stage::source_and_inputs",
                    &manifest.data,
                    format!(
                        "no file of the input `{}` is given for {}",
                        input.name,
                        source.value.display()
                    ),
                    "give the stage an `input` node for it",
                ));
            };
            input.source = file.source.clone();
        }
        spec.dialect.skip_rows = skip_rows;
        spec.format = DataFormat::of_name(&source.value).unwrap_or(spec.format);
        if spec.format.is_images() {
            // A directory of images to predict (`check` allows no other source of images).
            return Dataset::images_to_predict(&other, source, training);
        }
        // Held whole: a file to evaluate or predict is read once.
        spec.load.value = manifests::Load::Memory;
        let path = manifest.resolve(&source.value);
        // Without a header, the columns are the training's by position: every column
        // when there are as many as the training's features, else laid out as the data
        // file (an eval's source; a prediction's then has labels it ignores).
        let headerless_features_only = spec.format.is_text_table()
            && !spec.dialect.header
            && spec.text.is_none()
            && peek_features(&path, &spec.dialect, Layout::Features(&[]))
                == Some(training.sample_shape.iter().product::<i64>() as usize);
        let names = training.feature_columns.as_ref();
        match names {
            // The training's columns, by name, in the training's order.
            Some(names) if spec.has_header() => {
                spec.features = names.iter().cloned().map(Column::Name).collect();
            }
            _ if headerless_features_only && !labelled => spec.features.clear(),
            _ => {}
        }
        // The training's categorical columns are read as categories, whatever they hold.
        spec.categorical = training.categorical_as_declared(spec.has_header());
        let features_only =
            !spec.format.is_table() || spec.has_header() || headerless_features_only;
        if !labelled && features_only {
            spec.label.clear();
            // Marks the features as all there is (no label read from the source).
            spec.labels_file = Some(Spanned {
                value: PathBuf::new(),
                span: None,
            });
        }
        let classification = manifest.loss.kind.is_classification();
        Dataset::load_held(
            &other,
            classification,
            Fit::Training {
                data: training,
                labelled,
            },
            None,
        )
        .map_err(|mut d| {
            // Said of the stage's source, not of the data file.
            for label in &mut d.labels {
                if Some(label.span) == source.span && label.text == "data file" {
                    label.text = "this file".into();
                }
            }
            if d.code == "pipeline::data::bad_label_column" {
                d.code = "pipeline::data::other_columns";
                d.help = Some(match (names, labelled) {
                    (Some(names), _) => format!(
                        "give it the training's feature columns, by name: {}",
                        names.join(", ")
                    ),
                    (None, true) => "lay it out as the data file".into(),
                    (None, false) => {
                        "give it the training's features in order, or lay it out as the data file"
                            .into()
                    }
                });
            }
            d
        })
    }

    /// Another file's samples have the shape of the training's.
    pub(super) fn same_samples_as(
        &self,
        training: &Dataset,
        spec: &DataSpec,
    ) -> Result<(), Diagnostic> {
        // Before the categorical columns are encoded: their one-hot features aside.
        let read = training.read_shape();
        if self.sample_shape == read {
            return Ok(());
        }
        let values = |shape: &[i64]| match shape {
            [one] => format!("{one} values"),
            more => format!("values of shape {more:?}"),
        };
        Err(data_error(
            "pipeline::data::other_columns",
            spec,
            format!(
                "{}: its samples have {}, the training data's have {}",
                self.path.display(),
                values(&self.sample_shape),
                values(&read)
            ),
            match spec.has_header() {
                true => "give it the training's feature columns, by the same names",
                false => "give it the training's features in the same order (and no label column for a prediction)",
            },
        ))
    }

    /// Text class labels of another file become the training's class indices; a class
    /// the training did not have is an error. Without labels, the training's classes.
    pub(super) fn classes_of(
        &mut self,
        training: &Dataset,
        labelled: bool,
        spec: &DataSpec,
    ) -> Result<(), Diagnostic> {
        if labelled {
            if let (Some(own), Some(names)) = (&self.classes, &training.classes) {
                let mut map = Vec::with_capacity(own.len());
                for class in own {
                    let Ok(k) = names.binary_search(class) else {
                        let i = first_index(&self.labels.eq(map.len() as f64)).unwrap_or(0);
                        return Err(data_error(
                            "pipeline::data::unknown_class",
                            spec,
                            format!(
                                "{}: class `{class}` is not one the model was trained on ({})",
                                self.label_at(i),
                                names.join(", ")
                            ),
                            "evaluate on samples of the training's classes",
                        ));
                    };
                    map.push(k as f64);
                }
                // Missing labels (NaN) stay missing.
                let lookup = Tensor::from_slice(&map);
                let known = self.labels.isnan().logical_not();
                let index = self.labels.nan_to_num(0.0, None, None).to_kind(Kind::Int64);
                let mapped = lookup.index_select(0, &index.flatten(0, -1));
                self.labels = mapped.where_self(&known, &self.labels);
            } else if self.classes.is_some() != training.classes.is_some() {
                return Err(data_error(
                    "pipeline::data::unknown_class",
                    spec,
                    format!(
                        "{}: the labels are {}, the training's were {}",
                        self.path.display(),
                        if self.classes.is_some() {
                            "names"
                        } else {
                            "numbers"
                        },
                        if training.classes.is_some() {
                            "names"
                        } else {
                            "numbers"
                        },
                    ),
                    "label the samples as the training data is",
                ));
            }
        }
        self.classes = training.classes.clone();
        Ok(())
    }

    /// A sample to predict cannot be left out: a missing feature is an error, unless the
    /// training fills them (`missing "mean"`, `"median"`).
    pub(super) fn nothing_missing(
        &self,
        spec: &DataSpec,
        names: &[String],
        missing: &Tensor,
        column: impl Fn(&Dataset, usize) -> usize,
    ) -> Result<(), Diagnostic> {
        if matches!(spec.missing, Missing::Mean | Missing::Median) {
            return Ok(());
        }
        let Some(i) = first_index(missing) else {
            return Ok(());
        };
        let column = column(self, i);
        let name = names.get(column).map_or("?", String::as_str);
        Err(data_error(
            "pipeline::data::missing_value",
            spec,
            format!(
                "{}: feature `{name}` (column {column}) is missing, and a prediction leaves no sample out",
                self.at(i)
            ),
            "fill the value in, or train with `missing \"mean\"` or `\"median\"`, which fill it with the training split's",
        ))
    }

    /// Fills missing features with what the training filled its own with.
    pub(super) fn fill_as(&mut self, training: &Dataset) {
        let Some(filled) = &training.filled else {
            return;
        };
        let flat = self.features.flatten(1, -1);
        let stat = Tensor::from_slice(filled).to_kind(Kind::Float).unsqueeze(0);
        let filled = flat.where_self(&flat.isnan().logical_not(), &stat);
        self.features = filled.reshape(self.features.size());
        self.filled = training.filled.clone();
    }

    /// Scales the features, and the labels when there are (`labelled`), as the
    /// training's were.
    pub(super) fn scale_as(&mut self, training: &Dataset, labelled: bool) {
        let as_row = |v: &[f64]| Tensor::from_slice(v).to_kind(Kind::Float).unsqueeze(0);
        if let Some((shift, divide)) = &training.scaling {
            let shape = self.features.size();
            let scaled = (self.features.flatten(1, -1) - as_row(shift)) / as_row(divide);
            self.features = scaled.reshape(shape);
            self.scaling = training.scaling.clone();
        }
        // `data.inputs` as the training's were scaled (`extra` follows their order).
        for (name, (shift, divide)) in &training.extra_scaling {
            let Some(k) = self.input_names[self.own_inputs..]
                .iter()
                .position(|n| n == name)
            else {
                continue;
            };
            let values = &self.extra[k];
            let scaled = (values.flatten(1, -1) - as_row(shift)) / as_row(divide);
            self.extra[k] = scaled.reshape(values.size());
        }
        self.extra_scaling = training.extra_scaling.clone();
        if let Some((shift, divide)) = &training.label_scaling {
            if labelled {
                self.labels = (&self.labels - as_row(shift)) / as_row(divide);
            }
            self.label_scaling = training.label_scaling.clone();
        }
    }

    /// Regression outputs or targets (samples × labels) in the labels' own units: what
    /// `scale-label` subtracted added back, what it divided by multiplied (as they are
    /// without it).
    pub(crate) fn in_label_units(&self, values: &Tensor) -> Result<Tensor, TchError> {
        let Some((shift, divide)) = &self.label_scaling else {
            return Ok(values.shallow_clone());
        };
        let as_row = |v: &[f64]| {
            Tensor::f_from_slice(v)?
                .f_to_kind(values.kind())?
                .f_to_device(values.device())?
                .f_unsqueeze(0)
        };
        values.f_mul(&as_row(divide)?)?.f_add(&as_row(shift)?)
    }

    /// The label columns' names for the predictions' header: the table's, else `class`
    /// (classification) or `target`, `target_1`, … per output.
    pub fn label_columns(&self, classification: bool, outputs: usize) -> Vec<String> {
        if !self.label_names.is_empty() {
            return self.label_names.clone();
        }
        match (classification, outputs) {
            (true, _) => vec!["class".into()],
            (false, 1) => vec!["target".into()],
            (false, k) => (0..k).map(|j| format!("target_{j}")).collect(),
        }
    }
}

/// The feature columns' names when the data file is a table with a header of plain
/// features (a text column is found by its own key).
pub(super) fn feature_columns(spec: &DataSpec, names: &[String]) -> Option<Vec<String>> {
    (spec.has_header() && spec.text.is_none()).then(|| names.to_vec())
}
