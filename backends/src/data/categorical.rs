//! A table's categorical columns made model input: their missing cells (for
//! `data.missing`), filled with the training split's most frequent value, and encoded
//! with the training split's values, one-hot after the numeric features or by index as
//! inputs of their own (`pipeline_core::categorical` fits and encodes).

use super::{data_error, Dataset, Fit};
use manifests::{Column, DataSpec, Diagnostic, Encoding, Manifest, Missing};
use pipeline_core::categorical::Vocabulary;
use tch::{Device, Kind, Tensor};

impl Dataset {
    /// Which samples miss a categorical value (a boolean vector).
    pub(super) fn categories_missing(&self) -> Tensor {
        let n = self.rows.len();
        let missing: Vec<bool> = (0..n)
            .map(|i| self.categories.iter().any(|c| c.is_missing(i)))
            .collect();
        Tensor::from_slice(&missing).to_device(self.features.device())
    }

    /// `missing "mean"` / `"median"`: a missing category is the training split's most
    /// frequent value (the training data's for another file).
    pub(super) fn fill_categories(
        &mut self,
        spec: &DataSpec,
        fit: Fit<'_>,
    ) -> Result<(), Diagnostic> {
        if !matches!(spec.missing, Missing::Mean | Missing::Median) {
            return Ok(());
        }
        for k in 0..self.categories.len() {
            let column = &self.categories[k];
            let value = match fit {
                Fit::Own => column.most_frequent(&self.splits.train),
                Fit::Training { data, .. } => data
                    .categorical
                    .iter()
                    .find(|v| v.column == column.name)
                    .and_then(|v| v.fill.clone()),
            };
            let Some(value) = value else {
                if (0..column.rows()).all(|i| !column.is_missing(i)) {
                    continue;
                }
                return Err(data_error(
                    "pipeline::data::missing_value",
                    spec,
                    format!(
                        "{}: the categorical column `{}` is missing from every training sample, so there is nothing to fill it with",
                        self.path.display(),
                        column.name
                    ),
                    "leave the column out (`features`), or such rows (`missing \"drop-row\"`)",
                ));
            };
            self.categories[k].fill(&value);
        }
        Ok(())
    }

    /// Encodes the categorical columns with the training split's values (`fit`: its own,
    /// or the training data's): the one-hot ones' features after the numeric ones (named
    /// `numeric`), the others' ids as their inputs; counts the samples whose value the
    /// training split does not hold.
    pub(super) fn encode_categories(
        &mut self,
        manifest: &Manifest,
        numeric: &[String],
        fit: Fit<'_>,
    ) -> Result<(), Diagnostic> {
        let spec = &manifest.data;
        let categories = std::mem::take(&mut self.categories);
        let mut vocabularies = Vec::new();
        for column in &categories {
            let vocabulary = match fit {
                Fit::Own => {
                    let encoding = column.encoding(&spec.categorical);
                    let mut v = Vocabulary::fit(column, &self.splits.train, encoding);
                    if encoding == Encoding::Index {
                        v.input = Some(column.input(&spec.categorical));
                    }
                    if matches!(spec.missing, Missing::Mean | Missing::Median) {
                        v.fill = column.most_frequent(&self.splits.train);
                    }
                    v
                }
                Fit::Training { data, .. } => {
                    let Some(v) = data.categorical.iter().find(|v| v.column == column.name) else {
                        let row = (0..column.rows())
                            .find(|&i| !column.is_missing(i))
                            .unwrap_or(0);
                        return Err(data_error(
                            "pipeline::data::bad_row",
                            spec,
                            format!(
                                "{}: feature `{}` is not a number: `{}`; the training data has numbers in it",
                                self.at(row),
                                column.name,
                                column.value(row).unwrap_or_default()
                            ),
                            "give the file the training data's columns, numbers where it has numbers",
                        ));
                    };
                    v.clone()
                }
            };
            vocabularies.push(vocabulary);
        }
        // The training split holds every one of its own values: a value it lacks is in
        // the other splits (or another file).
        let mut ids: Vec<(String, Tensor)> = Vec::new();
        let n = self.rows.len() as i64;
        let mut unseen = vec![0; categories.len()];
        for ((column, vocabulary), unseen) in categories.iter().zip(&vocabularies).zip(&mut unseen)
        {
            if vocabulary.encoding == Encoding::Index {
                let (values, count) = vocabulary.encode(column);
                *unseen = count;
                let input = vocabulary
                    .input
                    .clone()
                    .unwrap_or_else(|| column.name.clone());
                ids.push((input, Tensor::from_slice(&values).reshape([n, 1])));
            }
        }
        // The one-hot blocks are written into the features they follow, one tensor
        // allocated once (not a block each, then their concatenation).
        let numbers = self.features.flatten(1, -1);
        let first = numbers.size()[1] as usize;
        let one_hot: usize = vocabularies
            .iter()
            .filter(|v| v.encoding == Encoding::OneHot)
            .map(Vocabulary::width)
            .sum();
        if one_hot > 0 {
            let width = first + one_hot;
            let features = Tensor::zeros([n, width as i64], (Kind::Float, Device::Cpu));
            features.narrow(1, 0, first as i64).copy_(&numbers);
            // SAFETY: a new, contiguous float32 CPU tensor owns exactly `n × width` values
            // at data_ptr, nothing else refers to it while `out` lives, and every float bit
            // pattern is a valid f32.
            let out = unsafe {
                std::slice::from_raw_parts_mut(features.data_ptr() as *mut f32, n as usize * width)
            };
            let mut offset = first;
            for ((column, v), unseen) in categories.iter().zip(&vocabularies).zip(&mut unseen) {
                if v.encoding == Encoding::OneHot {
                    *unseen = v.encode_into(column, out, width, offset);
                    offset += v.width();
                }
            }
            self.features = features;
            self.sample_shape = self.features.size()[1..].to_vec();
        }
        for (column, unseen) in categories.iter().zip(unseen) {
            if unseen > 0 {
                self.unseen.push((column.name.clone(), unseen));
            }
        }
        // The ids in the order of the model's inputs.
        let from = self.input_names.len() - ids.len();
        for name in &self.input_names[from..] {
            let k = ids
                .iter()
                .position(|(input, _)| input == name)
                .expect("an index input per `categorical` node of the data");
            self.ids.push(ids.swap_remove(k).1);
        }
        let mut names: Vec<String> = numeric.to_vec();
        for v in vocabularies
            .iter()
            .filter(|v| v.encoding == Encoding::OneHot)
        {
            names.extend(v.feature_names());
        }
        self.input_columns = Some(names);
        self.categorical = vocabularies;
        self.ids_fit(manifest, from)
    }

    /// A row's shape as read, before the one-hot features of its categorical columns (a
    /// window holds several rows).
    pub(super) fn read_shape(&self) -> Vec<i64> {
        let one_hot: usize = self
            .categorical
            .iter()
            .filter(|v| v.encoding == Encoding::OneHot)
            .map(Vocabulary::width)
            .sum();
        // A window's rows.
        let row = &self.sample_shape[self.window_length.is_some() as usize..];
        match (one_hot, row) {
            (0, _) => row.to_vec(),
            (_, [width]) => vec![width - one_hot as i64],
            (_, other) => other.to_vec(),
        }
    }

    /// The `categorical` nodes another file is read with: the training's columns, each
    /// as it was encoded, by name (by position without a header).
    pub(super) fn categorical_as_declared(&self, header: bool) -> Vec<manifests::CategoricalSpec> {
        self.categorical
            .iter()
            .map(|v| manifests::CategoricalSpec {
                columns: vec![match header {
                    true => Column::Name(v.column.clone()),
                    false => Column::Index(v.index),
                }],
                encoding: v.encoding,
                input: v.input.clone(),
                span: None,
            })
            .collect()
    }
}
