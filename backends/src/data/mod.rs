//! Loading a data set into tensors: CSV / CSV.gz (read by `pipeline_core::table`, as
//! `data` says the file is written), Parquet (`pipeline_core::parquet`), NPY, NPZ and
//! safetensors, with labels from the same
//! file or from a labels file; text class labels mapped to indices; missing values
//! (`data.missing`); the seeded train / val / test split, stratified on request; and
//! feature scaling and filling fitted on the training split only.
//!
//! Images (`image-folder`, `image-list`) are decoded once and transformed per batch, or
//! streamed: decoded per batch (`images.rs`).
//!
//! NPY features can be streamed instead of held (`data.load`, `stream.rs`): read per
//! batch from one file or shards. Otherwise the data set is held in memory (tabular data
//! on the device, images as 8-bit pixels). Batches that are assembled on the host
//! (streamed features, images) are assembled ahead of the math by `loader.rs`.

mod categorical;
mod images;
mod inputs;
mod loader;
mod other;
mod read;
mod stream;
mod windows;

pub use images::ImageSet;
pub use loader::Loader;
pub use stream::NpyStream;

use manifests::layers::{Embedding, Layer};
use manifests::{DataSpec, Diagnostic, Manifest, Missing, Scale, TextSpec};
use other::feature_columns;
use pipeline_core::categorical::Vocabulary;
use pipeline_core::fingerprint::SOURCE_ROLE;
use pipeline_core::freshness::regular_input;
use pipeline_core::network::{Input, Network, Op};
use pipeline_core::split::{Folds, Splits};
use pipeline_core::text::{TextTokenizer, TokenizerError};
use read::{read_labels_file, read_source, Labels, Source};
use std::path::{Path, PathBuf};
use tch::{Device, Kind, TchError, Tensor};
use windows::Windows;

/// How a sample is named in messages: its CSV line, its index in an array file, or its
/// shard and index there.
#[derive(Debug, Clone)]
pub(crate) enum Origin {
    Lines(Vec<usize>),
    Indices,
    Shards(Vec<pipeline_core::shards::Shard>),
}

/// The samples of a run, split and scaled, on one device.
#[derive(Debug)]
pub struct Dataset {
    /// `N × sample_shape`, float32 (empty for images, which `images` holds): the first
    /// model input (`features`, `tokens`).
    pub features: Tensor,
    /// Texts and token ids: `N × sample_shape`, 1 for a token and 0 for padding, the
    /// model input `mask`.
    pub mask: Option<Tensor>,
    /// The model inputs' names (`DataSpec::inputs`).
    pub input_names: Vec<String>,
    /// `data.inputs`' values, in order: `N × its sample shape`, float32.
    pub extra: Vec<Tensor>,
    /// What scaling subtracted from and divided each scaled input by.
    pub extra_scaling: Vec<(String, Scaling)>,
    /// The ids of the categorical columns encoded by index (`N × 1`, float32), in the
    /// order of their inputs.
    pub ids: Vec<Tensor>,
    /// How many model inputs the data file gives itself (`DataSpec::own_inputs`).
    own_inputs: usize,
    /// The categorical columns as read, until they are encoded.
    categories: Vec<pipeline_core::categorical::Categories>,
    /// The categorical columns' values (the training split's) and encodings, in the
    /// order of the feature columns: the one-hot ones' features follow the numeric ones.
    pub categorical: Vec<Vocabulary>,
    /// The features of a sample by name (the numeric columns, then `column=value` per
    /// one-hot category), when some column is categorical.
    pub input_columns: Option<Vec<String>>,
    /// The columns of dates, each with the parts it gives as features.
    pub dates: Vec<(String, Vec<manifests::DatePart>)>,
    /// Per categorical column, how many samples outside the training split held a value
    /// the training split does not (encoded as none).
    pub unseen: Vec<(String, usize)>,
    /// Windows of a series (`data.window`): the rows a sample holds.
    pub window_length: Option<i64>,
    /// Image data: the decoded images, transformed per batch.
    pub images: Option<ImageSet>,
    /// Streamed features (`data.load`): read per batch, not held.
    pub stream: Option<NpyStream>,
    /// Streamed features: the largest value, for the embeddings' id range.
    largest_streamed: Option<f64>,
    /// The threads assembling host batches ahead of the math (`data.workers`; none for 0).
    pool: Option<rayon::ThreadPool>,
    /// Batches assembled ahead (`data.prefetch`).
    prefetch: usize,
    /// `N` class indices (int64) for classification, else `N × k` float32 targets.
    pub labels: Tensor,
    pub sample_shape: Vec<i64>,
    pub splits: Splits,
    /// With `data.split folds=K`: the fold (from 1) whose split this is.
    pub fold: Option<u64>,
    /// The data file, for messages.
    pub path: PathBuf,
    /// What scaling subtracted from and divided the features by (per feature), so that
    /// checkpoints can record it for whoever applies the model later.
    pub scaling: Option<Scaling>,
    /// What `scale-label` subtracted from and divided each label column by (regression).
    pub label_scaling: Option<Scaling>,
    /// The class names of text labels, in the order of their indices (sorted).
    pub classes: Option<Vec<String>>,
    /// Tables with a header: the feature columns' names, by which another file's columns
    /// are matched (`predict`).
    pub feature_columns: Option<Vec<String>>,
    /// The label columns' names (a table's; `class` or `target` for arrays), for the
    /// predictions' header.
    pub label_names: Vec<String>,
    /// The values `missing "mean"` or `"median"` filled each feature with (fitted on the
    /// training split), for checkpoints.
    pub filled: Option<Vec<f64>>,
    /// Each sample's row among the file's data rows (0-based; a header, skipped and
    /// comment lines not counted, dropped rows counted), for `split.json`.
    pub rows: Vec<usize>,
    origin: Origin,
    /// The labels file, when the labels come from one (for messages about a label).
    labels_path: Option<PathBuf>,
}

/// What assembles a batch's first input on the host: images (decoded and transformed), or
/// streamed features (sample `i` is row `rows[i]` of the shards).
#[derive(Clone, Copy)]
pub(crate) enum Host<'a> {
    Images(&'a ImageSet),
    Stream(&'a NpyStream, &'a [usize]),
}

impl Host<'_> {
    /// The samples `ids` as a CPU batch: images augmented for `epoch` when training
    /// (`None`: evaluating), or streamed features read, filled and scaled.
    pub(crate) fn assemble(&self, ids: &[usize], epoch: Option<u64>) -> Result<Tensor, TchError> {
        match self {
            Host::Images(set) => set.batch(ids, epoch).map_err(TchError::Kind),
            Host::Stream(stream, rows) => stream.batch(ids, rows).map_err(TchError::Kind),
        }
    }
}

/// Whose statistics a held data set is split, filled and scaled with.
#[derive(Clone, Copy)]
enum Fit<'a> {
    /// Its own training split's: the data file.
    Own,
    /// Another file's samples, all of them, as `data` (the training data) was: for an
    /// `eval` on it (`labelled`) or a `predict` (no labels read).
    Training { data: &'a Dataset, labelled: bool },
}

/// What scaling subtracted from each value of a sample, and what it divided it by.
pub type Scaling = (Vec<f64>, Vec<f64>);

/// Class labels must be below this (2^53).
const MAX_CLASS_INDEX: f64 = 9_007_199_254_740_992.0;

pub(crate) fn data_error(
    code: &'static str,
    spec: &DataSpec,
    message: String,
    help: &str,
) -> Diagnostic {
    Diagnostic::error(code, message)
        .label_opt(spec.source.span, "data file")
        .help(help.to_string())
}

impl Dataset {
    /// Loads the manifest's data. `classification` asks for class-index labels. With
    /// `data.split folds=K`, split as fold `fold` (from 1) is: filled and scaled with its
    /// training part's statistics.
    pub fn load(
        manifest: &Manifest,
        classification: bool,
        fold: Option<u64>,
    ) -> Result<Dataset, Diagnostic> {
        let mut dataset = if manifest.data.format.is_images() {
            Dataset::load_images(manifest, classification, fold)?
        } else if pipeline_core::load::streams(manifest) {
            Dataset::load_stream(manifest, classification, fold)?
        } else {
            Dataset::load_held(manifest, classification, Fit::Own, fold)?
        };
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let workers = manifest.data.workers.map_or(cores, |w| w as usize);
        if dataset.host().is_some() && workers > 0 {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(workers)
                .thread_name(|i| format!("pipeline-data-{i}"))
                .build()
                .map_err(|e| {
                    data_error(
                        "pipeline::data::workers",
                        &manifest.data,
                        format!("cannot start {workers} data workers: {e}"),
                        "lower `data.workers`",
                    )
                })?;
            dataset.pool = Some(pool);
        }
        dataset.prefetch = manifest.data.prefetch.max(1) as usize;
        // Regression targets (check refuses `scale-label` for classes), with the training
        // split's statistics.
        let scale_label = manifest.data.scale_label.value;
        dataset.label_scaling = scale_on(&mut dataset.labels, &dataset.splits.train, scale_label);
        Ok(dataset)
    }

    /// The skeleton of a data set of `n` samples from the manifest's data: nothing read
    /// yet (no features, labels or split).
    fn skeleton(manifest: &Manifest, origin: Origin, n: usize) -> Dataset {
        let spec = &manifest.data;
        Dataset {
            features: Tensor::zeros([0], (Kind::Float, Device::Cpu)),
            mask: None,
            input_names: spec.inputs(),
            extra: Vec::new(),
            extra_scaling: Vec::new(),
            ids: Vec::new(),
            own_inputs: spec.own_inputs().len(),
            categories: Vec::new(),
            categorical: Vec::new(),
            input_columns: None,
            dates: Vec::new(),
            unseen: Vec::new(),
            window_length: None,
            images: None,
            stream: None,
            largest_streamed: None,
            pool: None,
            prefetch: 1,
            labels: Tensor::new(),
            sample_shape: Vec::new(),
            splits: Splits::new(0, &spec.split),
            fold: None,
            path: manifest.resolve(&spec.source.value),
            scaling: None,
            label_scaling: None,
            classes: None,
            feature_columns: None,
            label_names: Vec::new(),
            filled: None,
            rows: (0..n).collect(),
            origin,
            labels_path: spec
                .labels_file
                .as_ref()
                .map(|f| manifest.resolve(&f.value)),
        }
    }

    /// Features read whole into memory, split (as fold `fold`), filled and scaled as
    /// `fit` says.
    fn load_held(
        manifest: &Manifest,
        classification: bool,
        fit: Fit<'_>,
        fold: Option<u64>,
    ) -> Result<Dataset, Diagnostic> {
        let spec = &manifest.data;
        let path = manifest.resolve(&spec.source.value);
        let role = match fit {
            Fit::Own => "data",
            Fit::Training { .. } => SOURCE_ROLE,
        };
        input_files(manifest, role, &spec.source)?;
        let tokenizer = match &spec.text {
            Some(text) => Some(open_tokenizer(manifest, text)?),
            None => None,
        };
        let Source {
            features,
            names: feature_names,
            labels,
            origin,
            mask,
            categorical,
            columns,
            dates,
        } = read_source(&manifest.base_dir, spec, tokenizer.as_ref())?;
        if let Some(d) = categorical
            .iter()
            .find_map(|c| pipeline_core::categorical::too_many(spec, &path, c, None))
        {
            return Err(d);
        }
        let mask = match (mask, spec.padding_id) {
            (Some(mask), _) => Some(mask),
            (None, Some(id)) => Some(token_mask(spec, &path, &features, id)?),
            (None, None) => None,
        };
        let n = features.size().first().copied().unwrap_or(0);
        // (Every feature column may be categorical.)
        let no_features = features.size()[1..].contains(&0) && categorical.is_empty();
        if n == 0 || features.dim() < 2 || no_features {
            return Err(data_error(
                "pipeline::data::bad_shape",
                spec,
                format!(
                    "{}: features must be an array of shape (samples, …) with at least one sample and one feature, found {:?}",
                    path.display(),
                    features.size()
                ),
                "store one row per sample",
            ));
        }
        let labels = match (labels, fit) {
            (
                _,
                Fit::Training {
                    labelled: false, ..
                },
            ) => Labels::Array(Tensor::zeros([n], (Kind::Double, Device::Cpu))),
            (Some(labels), _) => labels_of_count(manifest, labels, n)?,
            (None, _) => labels_of_file(manifest, n)?,
        };
        let features = features.to_kind(Kind::Float);
        let mut dataset = Dataset::skeleton(manifest, origin, n as usize);
        dataset.fold = fold;
        dataset.sample_shape = features.size()[1..].to_vec();
        if let Fit::Training { data, .. } = fit {
            dataset.same_samples_as(data, spec)?;
        }
        dataset.features = features;
        dataset.mask = mask;
        dataset.categories = categorical;
        dataset.read_extra_inputs(manifest, n as usize)?;
        if let (Labels::Cells { names, .. }, true) = (&labels, spec.has_header()) {
            dataset.label_names = names.clone();
        }
        let (labels, classes) = dataset.labels_from(labels, spec, classification)?;
        dataset.labels = labels;
        dataset.classes = classes;
        if let Fit::Training { data, labelled } = fit {
            dataset.classes_of(data, labelled, spec)?;
        }
        dataset.feature_columns = feature_columns(spec, &columns);
        if !dates.is_empty() {
            // The parts of the dates among the features (one-hot ones may follow).
            dataset.input_columns = Some(feature_names.clone());
        }
        dataset.dates = dates;
        dataset.missing_features(spec, &feature_names, fit)?;
        dataset.every_sample_has_a_token(spec)?;
        dataset.ids_fit(manifest, 0)?;
        let n = dataset.rows.len();
        let labelled = !matches!(
            fit,
            Fit::Training {
                labelled: false,
                ..
            }
        );
        let own_split = matches!(fit, Fit::Own).then_some(&spec.split);
        let windows = match &spec.window {
            Some(w) => Some(Windows::of(spec, w, n, labelled, own_split, &path)?),
            None => None,
        };
        dataset.splits = dataset.row_splits(spec, fit, classification, windows.as_ref());
        match fit {
            Fit::Own => dataset.fill(spec, &feature_names)?,
            Fit::Training { data, .. } => dataset.fill_as(data),
        }
        dataset.fill_categories(spec, fit)?;
        dataset.all_finite(spec)?;
        dataset.check_extra_masks(manifest)?;
        match fit {
            Fit::Own => {
                dataset.scale(spec.scale);
                dataset.scale_extra_inputs(manifest);
            }
            Fit::Training { data, labelled } => dataset.scale_as(data, labelled),
        }
        if !dataset.categories.is_empty() {
            dataset.encode_categories(manifest, &feature_names, fit)?;
        }
        if let Some(windows) = windows {
            dataset.cut_windows(windows, labelled);
        }
        Ok(dataset)
    }

    /// How the rows are split for filling and scaling: with windows, the rows each
    /// split's windows read; another file whole as `test`; else the data's split.
    fn row_splits(
        &self,
        spec: &DataSpec,
        fit: Fit<'_>,
        classification: bool,
        windows: Option<&Windows>,
    ) -> Splits {
        let n = self.rows.len();
        match (fit, windows) {
            (_, Some(windows)) => windows.rows.clone(),
            // Another file is applied to whole: all of it is its `test` split.
            (Fit::Training { .. }, None) => Splits {
                train: Vec::new(),
                val: Vec::new(),
                test: (0..n).collect(),
            },
            (Fit::Own, None) => self.own_splits(spec, classification),
        }
    }

    /// The data's split of its samples (by class, as fold `self.fold`: what
    /// `data.split` says).
    pub(crate) fn own_splits(&self, spec: &DataSpec, classification: bool) -> Splits {
        let classes = (spec.split.stratify && classification)
            .then(|| Vec::<i64>::try_from(&self.labels).expect("class labels are an int64 vector"));
        Splits::of(self.rows.len(), classes.as_deref(), &spec.split, self.fold)
    }

    /// Every feature is finite, else the first sample with one that is not is named.
    fn all_finite(&self, spec: &DataSpec) -> Result<(), Diagnostic> {
        // A finite sum means every feature is finite; only otherwise pay for a mask as
        // large as the data to find the first culprit (an f32 sum that merely overflows
        // finds none). Summing in f64 would first copy the data into f64.
        let sum_is_finite = self.features.sum(Kind::Float).double_value(&[]).is_finite();
        let first_bad = || {
            let bad_rows = self
                .features
                .isfinite()
                .logical_not()
                .flatten(1, -1)
                .any_dim(1, false);
            first_index(&bad_rows)
        };
        if let Some(i) = (!sum_is_finite).then(first_bad).flatten() {
            return Err(data_error(
                "pipeline::data::not_finite",
                spec,
                format!("{}: a feature is infinite", self.at(i)),
                "clean the data: every feature must be a finite number",
            ));
        }
        Ok(())
    }

    /// `data.missing` applied to the samples missing a feature, numeric or categorical
    /// (`numeric`: the numeric ones' names): none may be missing from a prediction
    /// unless the training fills them.
    fn missing_features(
        &mut self,
        spec: &DataSpec,
        numeric: &[String],
        fit: Fit<'_>,
    ) -> Result<(), Diagnostic> {
        // Every feature column's name, numeric then categorical (as messages count them).
        let names: Vec<String> = numeric
            .iter()
            .cloned()
            .chain(self.categories.iter().map(|c| c.name.clone()))
            .collect();
        let missing = self
            .features
            .isnan()
            .flatten(1, -1)
            .any_dim(1, false)
            .logical_or(&self.categories_missing());
        // The first feature sample `i` misses: a number's, else a category's.
        let numeric = numeric.len();
        let column = move |d: &Dataset, i: usize| {
            first_index(&d.features.get(i as i64).flatten(0, -1).isnan())
                .or_else(|| {
                    d.categories
                        .iter()
                        .position(|c| c.is_missing(i))
                        .map(|k| numeric + k)
                })
                .unwrap_or(0)
        };
        if let Fit::Training {
            labelled: false, ..
        } = fit
        {
            self.nothing_missing(spec, &names, &missing, column)?;
        }
        self.missing_values(spec, &names, &missing, column)
    }

    /// The labels as class indices (text labels mapped to their sorted names' indices)
    /// or float targets. Missing labels are NaN for now (and rows `drop-row` leaves out).
    fn labels_from(
        &self,
        labels: Labels,
        spec: &DataSpec,
        classification: bool,
    ) -> Result<(Tensor, Option<Vec<String>>), Diagnostic> {
        let n = self.rows.len();
        let (values, classes): (Tensor, Option<Vec<String>>) = match labels {
            Labels::Array(t) => (t.to_kind(Kind::Double), None),
            Labels::Cells {
                columns,
                names,
                lines,
                path,
            } => {
                let at = |i: usize| match &lines {
                    Some(lines) => format!("{}:{}", path.display(), lines[i]),
                    None => format!("{}, row {i}", path.display()),
                };
                if classification && columns.len() != 1 {
                    return Err(data_error(
                        "pipeline::data::several_class_labels",
                        spec,
                        format!(
                            "{}: class labels are one column, but there are {} ({})",
                            path.display(),
                            columns.len(),
                            names.join(", ")
                        ),
                        "keep one label column, or use a regression loss for several targets",
                    ));
                }
                let numbers = |cell: &str| cell.parse::<f64>().ok();
                let text = columns
                    .iter()
                    .flatten()
                    .flatten()
                    .any(|c| numbers(c).is_none());
                if text && classification {
                    let mut classes: Vec<String> = columns[0].iter().flatten().cloned().collect();
                    classes.sort();
                    classes.dedup();
                    let index: Vec<f64> = columns[0]
                        .iter()
                        .map(|c| match c {
                            Some(c) => classes.binary_search(c).expect("listed") as f64,
                            None => f64::NAN,
                        })
                        .collect();
                    (Tensor::from_slice(&index), Some(classes))
                } else {
                    let mut values = vec![f64::NAN; n * columns.len()];
                    for (k, column) in columns.iter().enumerate() {
                        for (i, cell) in column.iter().enumerate() {
                            let Some(cell) = cell else { continue };
                            values[i * columns.len() + k] = numbers(cell).ok_or_else(|| {
                                data_error(
                                    "pipeline::data::bad_label",
                                    spec,
                                    format!(
                                        "{}: label `{}` is not a number: `{cell}`",
                                        at(i),
                                        names[k]
                                    ),
                                    "a regression loss needs numeric targets; class names go with `cross-entropy` or `nll`",
                                )
                            })?;
                        }
                    }
                    let t = Tensor::from_slice(&values);
                    let t = if columns.len() == 1 {
                        t
                    } else {
                        t.reshape([n as i64, columns.len() as i64])
                    };
                    (t, None)
                }
            }
        };
        let labels = if classification {
            let labels = values.flatten(0, -1);
            if labels.size()[0] != n as i64 {
                return Err(data_error(
                    "pipeline::data::bad_shape",
                    spec,
                    format!(
                        "{}: class labels must be one number per sample",
                        self.path.display()
                    ),
                    "store labels as a 1-D array",
                ));
            }
            // Whole numbers from 0 that an int64 holds exactly (beyond 2^53 a double
            // no longer tells neighbouring integers apart; no model has that many classes).
            // NaN (missing) is left for `missing_values`.
            let bad = labels
                .lt(0.0)
                .logical_or(
                    &labels
                        .frac()
                        .ne(0.0)
                        .logical_and(&labels.isnan().logical_not()),
                )
                .logical_or(&labels.isinf())
                .logical_or(&labels.ge(MAX_CLASS_INDEX));
            if let Some(i) = first_index(&bad) {
                let value = labels.double_value(&[i as i64]);
                return Err(data_error(
                    "pipeline::data::bad_label",
                    spec,
                    format!("{}: label {value} is not a class index", self.label_at(i)),
                    "cross-entropy and nll need labels that are whole numbers from 0, or class names",
                ).label_opt(spec.labels_file.as_ref().and_then(|l| l.span), "labels file"));
            }
            labels
        } else if values.dim() == 1 {
            values.unsqueeze(1)
        } else {
            values.flatten(1, -1)
        };
        Ok((labels, classes))
    }

    /// Applies `data.missing` to missing labels (always) and missing features (`error`,
    /// `drop-row`); the class labels become int64 and the targets float32. `features`
    /// says which samples miss a feature, `column` which feature sample `i` misses first.
    fn missing_values(
        &mut self,
        spec: &DataSpec,
        names: &[String],
        features: &Tensor,
        column: impl Fn(&Dataset, usize) -> usize,
    ) -> Result<(), Diagnostic> {
        let labels = if self.labels.dim() == 1 {
            self.labels.isnan()
        } else {
            self.labels.isnan().flatten(1, -1).any_dim(1, false)
        };
        if spec.missing == Missing::DropRow {
            let keep = labels.logical_or(features).logical_not();
            let kept: Vec<i64> = Vec::try_from(&keep.nonzero().flatten(0, -1)).unwrap_or_default();
            if kept.is_empty() {
                return Err(data_error(
                    "pipeline::data::nothing_left",
                    spec,
                    format!("{}: every row has a missing value", self.path.display()),
                    "with `missing \"drop-row\"` no sample is left: fill them instead (`missing \"median\"`)",
                ));
            }
            if kept.len() < self.rows.len() {
                let index = Tensor::from_slice(&kept);
                if self.stream.is_none() {
                    self.features = self.features.index_select(0, &index);
                }
                self.labels = self.labels.index_select(0, &index);
                self.mask = self.mask.as_ref().map(|m| m.index_select(0, &index));
                for values in &mut self.extra {
                    *values = values.index_select(0, &index);
                }
                let rows: Vec<usize> = kept.iter().map(|&i| i as usize).collect();
                for column in &mut self.categories {
                    column.select(&rows);
                }
                let pick = |v: &[usize]| kept.iter().map(|&i| v[i as usize]).collect::<Vec<_>>();
                self.rows = pick(&self.rows);
                if let Origin::Lines(lines) = &self.origin {
                    self.origin = Origin::Lines(pick(lines));
                }
            }
        } else {
            if let Some(i) = first_index(&labels) {
                return Err(data_error(
                    "pipeline::data::missing_label",
                    spec,
                    format!("{}: the label is missing", self.label_at(i)),
                    "fix the label, or leave such rows out with `missing \"drop-row\"` (only features are filled)",
                ).label_opt(spec.labels_file.as_ref().and_then(|l| l.span), "labels file"));
            }
            if spec.missing == Missing::Error {
                if let Some(i) = first_index(features) {
                    let column = column(self, i);
                    let name = names.get(column).map_or("?", String::as_str);
                    if spec.text.is_some() {
                        return Err(data_error(
                            "pipeline::data::missing_value",
                            spec,
                            format!("{}: the text `{name}` is empty", self.at(i)),
                            "write the text, or leave such rows out with `missing \"drop-row\"`",
                        ));
                    }
                    return Err(data_error(
                        "pipeline::data::missing_value",
                        spec,
                        format!("{}: feature `{name}` (column {column}) is missing", self.at(i)),
                        "fix the value, or write `missing \"drop-row\"` (leave such rows out), `\"mean\"` or `\"median\"` (fill with the training split's)",
                    ));
                }
            }
        }
        self.labels = if self.labels.dim() == 1 {
            self.labels.to_kind(Kind::Int64)
        } else {
            self.labels.to_kind(Kind::Float)
        };
        Ok(())
    }

    /// The largest value of model input `i` (`None`: images, transformed per batch).
    fn largest_value(&self, i: usize) -> Option<i64> {
        let own = self.own_inputs;
        let values = match i.checked_sub(own) {
            Some(k) if k < self.extra.len() => self.extra.get(k),
            // The ids of a categorical column, once encoded.
            Some(k) => self.ids.get(k - self.extra.len()),
            None if i == 0 && self.stream.is_some() => {
                return self.largest_streamed.map(|v| v as i64)
            }
            None if i == 0 => self.images.is_none().then_some(&self.features),
            None => self.mask.as_ref(),
        }?;
        Some(values.nan_to_num(0.0, None, None).max().double_value(&[]) as i64)
    }

    /// Every `embedding` gets ids below its count from the input it reads (else it would
    /// fail in the middle of an epoch, on the first batch holding a larger one). A model
    /// whose shapes do not fit is left to the dry pass, which says where.
    /// Only the inputs from `from` on are looked at (the ids of categorical columns are
    /// known once encoded).
    fn ids_fit(&self, manifest: &Manifest, from: usize) -> Result<(), Diagnostic> {
        let Ok(network) = Network::compile(&manifest.model, &self.inputs()) else {
            return Ok(());
        };
        let written: Vec<Option<miette::SourceSpan>> = manifest
            .model
            .layers()
            .into_iter()
            .filter(|l| matches!(l.layer, Layer::Embedding(_)))
            .map(|l| l.span)
            .collect();
        let steps: Vec<(&Embedding, usize)> = network
            .steps
            .iter()
            .filter_map(|s| match &s.op {
                Op::Layer {
                    layer: Layer::Embedding(e),
                    ..
                } => Some((e, s.inputs[0])),
                _ => None,
            })
            .collect();
        for (k, &(embedding, input)) in steps.iter().enumerate() {
            let Some(largest) = self.largest_value(input).filter(|_| input >= from) else {
                continue;
            };
            if largest < embedding.count {
                continue;
            }
            // A repeated body's copies are one written layer: then the model is named.
            let span = match written.len() == steps.len() {
                true => written[k],
                false => manifest.model.span,
            };
            let name = &self.input_names[input];
            let holder = match (name.as_str(), &manifest.data.text) {
                ("tokens", Some(_)) => "the texts hold".to_string(),
                ("tokens", None) => "the data holds".to_string(),
                (other, _) => format!("the input `{other}` holds"),
            };
            let tokenizer = manifest.data.text.as_ref().filter(|_| name == "tokens");
            let help = match tokenizer {
                Some(_) => format!(
                    "give the embedding the tokenizer's vocabulary size: at least `embedding {}`",
                    largest + 1
                ),
                None => format!(
                    "give the embedding more ids: at least `embedding {}`",
                    largest + 1
                ),
            };
            return Err(Diagnostic::error(
                "pipeline::data::token_out_of_range",
                format!(
                    "{holder} token id {largest}, but `embedding {}` takes ids below {}",
                    embedding.count, embedding.count
                ),
            )
            .label_opt(span, "too few ids")
            .label_opt(tokenizer.and_then(|t| t.tokenizer.span), "the tokenizer")
            .help(help));
        }
        Ok(())
    }

    /// A sequence of padding only would leave attention and pooling nothing to read.
    fn every_sample_has_a_token(&self, spec: &DataSpec) -> Result<(), Diagnostic> {
        let Some(mask) = &self.mask else {
            return Ok(());
        };
        let empty = mask
            .flatten(1, -1)
            .sum_dim_intlist(1, false, Kind::Float)
            .eq(0.0);
        let Some(i) = first_index(&empty) else {
            return Ok(());
        };
        Err(match spec.padding_id {
            Some(id) => data_error(
                "pipeline::data::all_padding",
                spec,
                format!("{}: every position is the padding id {id}", self.at(i)),
                "a sequence needs one token at least: leave such samples out of the file, or check `padding-id`",
            ),
            None => data_error(
                "pipeline::data::all_padding",
                spec,
                format!("{}: the text gives no token", self.at(i)),
                "write the text, or let the tokenizer add its special tokens (`add-special-tokens=#true`)",
            ),
        })
    }

    /// `missing "mean"` / `"median"`: fills each feature's missing values with its
    /// statistic over the training split (a feature missing from every training sample
    /// is an error).
    fn fill(&mut self, spec: &DataSpec, names: &[String]) -> Result<(), Diagnostic> {
        if !matches!(spec.missing, Missing::Mean | Missing::Median) {
            return Ok(());
        }
        let flat = self.features.flatten(1, -1);
        // Fitted whether or not this file misses a value: another file applied the model
        // to (`predict`, an `eval`'s `source`) may.
        let train = index_tensor(&self.splits.train);
        let stat = match spec.missing {
            Missing::Mean => flat.index_select(0, &train).nanmean(0, false, Kind::Float),
            // Column by column, by selection rather than sorting (linear time, one
            // column's copy at a time).
            _ => {
                let columns = flat.size()[1];
                let medians: Vec<f32> = (0..columns)
                    .map(|j| {
                        let column = flat.select(1, j).index_select(0, &train);
                        pipeline_core::stats::nan_median(
                            Vec::<f32>::try_from(&column).unwrap_or_default(),
                        )
                    })
                    .collect();
                Tensor::from_slice(&medians)
            }
        };
        if let Some(j) = first_index(&stat.isnan()) {
            let name = names.get(j).map_or("?", String::as_str);
            return Err(data_error(
                "pipeline::data::missing_value",
                spec,
                format!(
                    "{}: feature `{name}` (column {j}) is missing from every training sample, so there is nothing to fill it with",
                    self.path.display()
                ),
                "leave the feature out (`features`), or such rows (`missing \"drop-row\"`)",
            ));
        }
        // In place, a column at a time: no second copy of the features.
        let flat = flat.contiguous();
        let stats = Vec::<f32>::try_from(&stat).unwrap_or_default();
        for (j, value) in stats.into_iter().enumerate() {
            let mut column = flat.select(1, j as i64);
            let missing = column.isnan();
            let _ = column.masked_fill_(&missing, f64::from(value));
        }
        self.features = flat.reshape(self.features.size());
        self.filled = Some(Vec::<f64>::try_from(&stat.to_kind(Kind::Double)).unwrap_or_default());
        Ok(())
    }

    /// The split as the file's data rows, for the run directory's `split.json`; with
    /// `data.split folds=K` (`spec`), every fold's rows (fold k is `folds[k - 1]`) and the
    /// test split's.
    pub fn split_rows(&self, spec: &DataSpec, classification: bool) -> serde_json::Value {
        let mut out = match &self.images {
            Some(set) => serde_json::json!({
                "root": set.listing.root,
                "files": "each sample's image, relative to `root`",
            }),
            None => serde_json::json!({
                "file": self.path,
                "rows": match &self.origin {
                    Origin::Shards(_) => "0-based rows of the shards, taken one after another in name order",
                    _ => "0-based data rows of the file (a header, skipped and comment lines not counted)",
                },
            }),
        };
        let part = |split: &[usize]| match &self.images {
            Some(set) => serde_json::json!(split
                .iter()
                .map(|&i| set.listing.files[i].to_string_lossy().into_owned())
                .collect::<Vec<_>>()),
            None => serde_json::json!(split.iter().map(|&i| self.rows[i]).collect::<Vec<_>>()),
        };
        match spec.split.folds {
            Some(_) => {
                let classes = (spec.split.stratify && classification).then(|| {
                    Vec::<i64>::try_from(&self.labels).expect("class labels are an int64 vector")
                });
                let folds = Folds::new(self.rows.len(), classes.as_deref(), &spec.split);
                out["folds"] = folds.folds.iter().map(|f| part(f)).collect();
                out["test"] = part(&folds.test);
            }
            None => {
                out["train"] = part(&self.splits.train);
                out["val"] = part(&self.splits.val);
                out["test"] = part(&self.splits.test);
            }
        }
        out
    }

    /// Where sample `i` is, for messages: `file:line` for CSV, else `file, sample i`.
    pub fn at(&self, i: usize) -> String {
        if let Some(set) = &self.images {
            return set.listing.at(self.rows[i]);
        }
        match &self.origin {
            Origin::Lines(lines) => format!("{}:{}", self.path.display(), lines[i]),
            Origin::Indices => format!("{}, sample {}", self.path.display(), self.rows[i]),
            Origin::Shards(shards) => {
                let row = self.rows[i] as u64;
                let at = shards.partition_point(|s| s.first + s.rows() <= row);
                match shards.get(at) {
                    Some(s) => format!("{}, sample {}", s.path.display(), row - s.first),
                    None => format!("{}, sample {row}", self.path.display()),
                }
            }
        }
    }

    /// Where sample `i`'s label is, for messages: in the labels file when there is one
    /// (its row `i`, counted as the data's), else where the sample is.
    fn label_at(&self, i: usize) -> String {
        match &self.labels_path {
            Some(path) => format!("{}, sample {}", path.display(), self.rows[i]),
            None => self.at(i),
        }
    }

    /// Scales the features with statistics of the training split only.
    fn scale(&mut self, scale: Scale) {
        self.scaling = scale_on(&mut self.features, &self.splits.train, scale);
    }

    /// Moves the samples to `device` (a no-op when they are there already).
    pub fn to_device(&mut self, device: Device) {
        self.features = self.features.to_device(device);
        self.labels = self.labels.to_device(device);
        self.mask = self.mask.as_ref().map(|m| m.to_device(device));
        for values in self.extra.iter_mut().chain(&mut self.ids) {
            *values = values.to_device(device);
        }
    }

    /// The model inputs, with the shape of one sample each.
    pub fn inputs(&self) -> Vec<Input> {
        let own = self.own_inputs;
        self.input_names
            .iter()
            .enumerate()
            .map(|(i, name)| Input {
                name: name.clone(),
                shape: match i.checked_sub(own) {
                    Some(k) if k < self.extra.len() => self.extra[k].size()[1..].to_vec(),
                    // A categorical column's ids: one per sample (per row of a window;
                    // one per row before they are encoded).
                    Some(k) => self
                        .ids
                        .get(k - self.extra.len())
                        .map_or(vec![1], |ids| ids.size()[1..].to_vec()),
                    None => self.sample_shape.clone(),
                },
            })
            .collect()
    }

    /// What assembles the first model input on the host, when the data set does not
    /// hold it: borrowed, so that the loader's workers can share it.
    pub(crate) fn host(&self) -> Option<Host<'_>> {
        match (&self.images, &self.stream) {
            (Some(set), _) => Some(Host::Images(set)),
            (None, Some(stream)) => Some(Host::Stream(stream, &self.rows)),
            (None, None) => None,
        }
    }

    /// The first model input of the samples `ids`, assembled on the host (`None` when
    /// the data set holds it).
    pub(crate) fn host_input(
        &self,
        ids: &[usize],
        epoch: Option<u64>,
    ) -> Result<Option<Tensor>, TchError> {
        self.host().map(|h| h.assemble(ids, epoch)).transpose()
    }

    /// The batch of the samples at `indices` (on the device): `host`, the first input
    /// assembled on the host, moved to the device, or the held one gathered; then the
    /// other inputs and the labels, gathered.
    pub(crate) fn assemble(
        &self,
        indices: &Tensor,
        host: Option<Tensor>,
    ) -> Result<(Vec<Tensor>, Tensor), TchError> {
        let labels = self.labels.f_index_select(0, indices)?;
        let first = match host {
            Some(values) => values.f_to_device(labels.device())?,
            None => self.features.f_index_select(0, indices)?,
        };
        let mut inputs = vec![first];
        if let Some(mask) = &self.mask {
            inputs.push(mask.f_index_select(0, indices)?);
        }
        for values in self.extra.iter().chain(&self.ids) {
            inputs.push(values.f_index_select(0, indices)?);
        }
        Ok((inputs, labels))
    }

    /// The model inputs (in the order of [`Dataset::inputs`]) and the labels of the
    /// samples `ids`, assembled here and now (a [`Loader`] assembles ahead); `epoch` says
    /// that the batch trains in that epoch (image augmentation draws for it), `None` that
    /// it evaluates.
    pub fn batch(
        &self,
        ids: &[usize],
        epoch: Option<u64>,
    ) -> Result<(Vec<Tensor>, Tensor), TchError> {
        let indices = index_tensor(ids).f_to_device(self.labels.device())?;
        let host = self.host_input(ids, epoch)?;
        self.assemble(&indices, host)
    }

    /// Checks that every class label fits the model's `classes` outputs.
    pub fn check_classes(&self, classes: i64) -> Result<(), (usize, i64)> {
        match first_index(&self.labels.ge(classes)) {
            Some(i) => Err((i, self.labels.int64_value(&[i as i64]))),
            None => Ok(()),
        }
    }

    /// The number of targets per sample (regression) or 1 (classification).
    pub fn target_width(&self) -> i64 {
        if self.labels.dim() == 2 {
            self.labels.size()[1]
        } else {
            1
        }
    }
}

/// A new float32 CPU batch of `shape`, every value written in place by `fill` (the
/// streamed features read, the images converted): no copy into a tensor afterwards, and
/// no zeroing first, since every value is written.
pub(crate) fn float_batch(
    shape: &[i64],
    fill: impl FnOnce(&mut [f32]) -> Result<(), String>,
) -> Result<Tensor, String> {
    let batch = Tensor::f_empty(shape, (Kind::Float, Device::Cpu))
        .map_err(|e| crate::error::short_message(&e))?;
    let n = batch.numel();
    if n == 0 {
        return Ok(batch);
    }
    // SAFETY: a new, contiguous float32 CPU tensor owns exactly `n` values at data_ptr
    // (memory libtorch allocated, as `arrays::read_tensor` fills), nothing else refers to
    // it until this function returns it, and every float bit pattern is a valid f32.
    let values = unsafe { std::slice::from_raw_parts_mut(batch.data_ptr() as *mut f32, n) };
    fill(values)?;
    Ok(batch)
}

/// The labels file's labels (one file, or shards), checked to be `n` rows.
fn labels_of_file(manifest: &Manifest, n: i64) -> Result<Labels, Diagnostic> {
    let spec = &manifest.data;
    let file = spec
        .labels_file
        .as_ref()
        .expect("labels come from the source or from a file");
    input_files(manifest, "labels", file)?;
    let labels = read_labels_file(&manifest.base_dir, spec)?;
    labels_of_count(manifest, labels, n)
}

/// The files of a manifest path (one file, or a pattern's matches), each a regular file;
/// a problem is a diagnostic at the path's key.
pub(crate) fn input_files(
    manifest: &Manifest,
    role: &str,
    written: &manifests::Spanned<PathBuf>,
) -> Result<Vec<PathBuf>, Diagnostic> {
    let files =
        pipeline_core::shards::files_of(&manifest.base_dir, &written.value).map_err(|e| {
            let (code, help) = e.code_and_help();
            Diagnostic::error(code, e.to_string())
                .label_opt(written.span, "these files")
                .help(help)
        })?;
    for file in &files {
        regular_input(manifest, role, file, written.span)?;
    }
    Ok(files)
}

/// `labels`, checked to be one row per sample of `n`.
fn labels_of_count(manifest: &Manifest, labels: Labels, n: i64) -> Result<Labels, Diagnostic> {
    let spec = &manifest.data;
    if labels.rows() == n {
        return Ok(labels);
    }
    let from = match &spec.labels_file {
        Some(file) => format!(" in {}", manifest.resolve(&file.value).display()),
        None => String::new(),
    };
    Err(data_error(
        "pipeline::data::bad_shape",
        spec,
        format!(
            "{}: {n} samples of features but {} rows of labels{from}",
            manifest.resolve(&spec.source.value).display(),
            labels.rows()
        ),
        "features and labels need the same number of samples, in the same order",
    )
    .label_opt(
        spec.labels_file.as_ref().and_then(|l| l.span),
        "labels file",
    ))
}

/// `data.padding-id`: the mask of token ids `ids` (1 where an id is not `padding`), once
/// every id is a whole number from 0 (or missing, for `data.missing`).
fn token_mask(
    spec: &DataSpec,
    path: &Path,
    ids: &Tensor,
    padding: i64,
) -> Result<Tensor, Diagnostic> {
    let ids = ids.to_kind(Kind::Double);
    let flat = ids.flatten(1, -1);
    let known = flat.isnan().logical_not();
    let bad = flat
        .lt(0.0)
        .logical_or(&flat.frac().ne(0.0))
        .logical_or(&flat.isinf())
        .logical_and(&known)
        .any_dim(1, false);
    if let Some(i) = first_index(&bad) {
        let row = flat.get(i as i64);
        let j = first_index(
            &row.lt(0.0)
                .logical_or(&row.frac().ne(0.0))
                .logical_or(&row.isinf())
                .logical_and(&row.isnan().logical_not()),
        )
        .unwrap_or(0);
        return Err(data_error(
            "pipeline::data::bad_token",
            spec,
            format!(
                "{}, sample {i}: position {j} holds {}, which is not a token id",
                path.display(),
                row.double_value(&[j as i64])
            ),
            "with `padding-id`, the features are token ids: whole numbers from 0",
        ));
    }
    Ok(ids.ne(padding as f64).to_kind(Kind::Float))
}

/// The tokenizer of `data.text`, or a diagnostic at its key naming the file.
fn open_tokenizer(manifest: &Manifest, text: &TextSpec) -> Result<TextTokenizer, Diagnostic> {
    let path = manifest.resolve(&text.tokenizer.value);
    regular_input(manifest, "tokenizer", &path, None)?;
    TextTokenizer::open(&path, text).map_err(|e| {
        let d = |message: String| {
            Diagnostic::error("pipeline::data::bad_tokenizer", format!("{}: {message}", path.display()))
        };
        match e {
            TokenizerError::NotATokenizer(m) => d(m)
                .label_opt(text.tokenizer.span, "this tokenizer")
                .help("name a Hugging Face tokenizer.json, as `tokenizer.save(\"tokenizer.json\")` writes it"),
            TokenizerError::NoPadding(m) => d(m)
                .label_opt(text.tokenizer.span, "this tokenizer")
                .help("add a padding token to the tokenizer (`tokenizer.add_special_tokens([\"[PAD]\"])`), or set its padding (`tokenizer.enable_padding(pad_id=…, pad_token=…)`) before saving it"),
            TokenizerError::TooShort { length, specials } => d(format!(
                "`max-length {length}` leaves no room for text: the tokenizer adds {specials} special tokens"
            ))
            .label_opt(text.span, "these texts")
            .help(format!("give `max-length` more than {specials}, or `add-special-tokens=#false`")),
        }
    })
}

/// Indices as an int64 tensor.
pub fn index_tensor(indices: &[usize]) -> Tensor {
    let v: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
    Tensor::from_slice(&v)
}

/// The first index where a boolean vector is true.
fn first_index(mask: &Tensor) -> Option<usize> {
    let hits = mask.flatten(0, -1).nonzero();
    (hits.size()[0] > 0).then(|| hits.int64_value(&[0, 0]) as usize)
}

/// Scales `values` (samples first) in place with statistics of the samples `train`;
/// what it subtracted and divided by, per value of a sample (`None`: no scaling).
pub(crate) fn scale_on(values: &mut Tensor, train: &[usize], scale: Scale) -> Option<Scaling> {
    if scale == Scale::None {
        return None;
    }
    let train = values.index_select(0, &index_tensor(train));
    let (shift, divide) = match scale {
        Scale::Standard => (
            train.mean_dim(0, false, Kind::Float),
            train.std_dim(0, false, false),
        ),
        Scale::MinMax => {
            let (lo, hi) = (train.amin(0, false), train.amax(0, false));
            let range = &hi - &lo;
            (lo, range)
        }
        Scale::None => unreachable!(),
    };
    // Constant features are centred, not divided by zero.
    let divide = divide.where_self(&divide.gt(1e-8), &divide.ones_like());
    let _ = values.f_sub_(&shift).and_then(|mut f| f.f_div_(&divide));
    let listed = |t: &Tensor| {
        Vec::<f64>::try_from(&t.to_kind(Kind::Double).flatten(0, -1)).unwrap_or_default()
    };
    Some((listed(&shift), listed(&divide)))
}
