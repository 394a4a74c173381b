//! Categorical feature columns: a table's column of text (or one `data.categorical`
//! names) read as categories, their vocabulary fitted on the training split, and their
//! encoding, one-hot or by index. No libtorch: the loader turns the encodings into
//! tensors, and `check` describes the columns with the same reader.

use crate::table::{Layout, Table, GLANCE_ROWS};
use manifests::{CategoricalSpec, DataSpec, Diagnostic, Encoding, Manifest};
use std::collections::HashMap;
use std::path::Path;

/// A categorical column as read: each distinct value once, in the order first seen, and
/// each row's code (its value's place there; [`MISSING`] where the cell is missing).
#[derive(Debug, Clone, PartialEq)]
pub struct Categories {
    /// The column's name: the header's, or `column N`.
    pub name: String,
    /// The column in the file (0-based), for messages and to read another file alike.
    pub column: usize,
    pub values: Vec<String>,
    pub codes: Vec<u32>,
    /// The `data.categorical` node that names it (`None`: found to hold text).
    pub declared: Option<usize>,
    /// Where the values are kept apart while reading.
    index: HashMap<String, u32>,
}

/// The code of a missing cell.
pub const MISSING: u32 = u32::MAX;

impl Categories {
    pub fn new(name: String, column: usize) -> Categories {
        Categories {
            name,
            column,
            values: Vec::new(),
            codes: Vec::new(),
            declared: None,
            index: HashMap::new(),
        }
    }

    /// Appends a row's cell (`None`: missing).
    pub fn push(&mut self, cell: Option<&str>) {
        let code = match cell {
            None => MISSING,
            Some(value) => match self.index.get(value) {
                Some(&code) => code,
                None => {
                    let code = self.values.len() as u32;
                    self.values.push(value.to_string());
                    self.index.insert(value.to_string(), code);
                    code
                }
            },
        };
        self.codes.push(code);
    }

    pub fn rows(&self) -> usize {
        self.codes.len()
    }

    /// How it is encoded: as the `categorical` node of `declared` (the data's) that names
    /// it says, else one-hot.
    pub fn encoding(&self, declared: &[CategoricalSpec]) -> Encoding {
        self.declared
            .and_then(|node| declared.get(node))
            .map_or(Encoding::OneHot, |spec| spec.encoding)
    }

    /// The model input of its ids (`index`): the node's `input`, else its name.
    pub fn input(&self, declared: &[CategoricalSpec]) -> String {
        self.declared
            .and_then(|node| declared.get(node))
            .and_then(|spec| spec.input.clone())
            .unwrap_or_else(|| self.name.clone())
    }

    /// Whether row `i`'s cell is missing.
    pub fn is_missing(&self, i: usize) -> bool {
        self.codes[i] == MISSING
    }

    /// Row `i`'s value (`None`: missing).
    pub fn value(&self, i: usize) -> Option<&str> {
        let code = self.codes[i];
        (code != MISSING).then(|| self.values[code as usize].as_str())
    }

    /// The rows `kept` (indices into these rows), in that order.
    pub fn select(&mut self, kept: &[usize]) {
        self.codes = kept.iter().map(|&i| self.codes[i]).collect();
    }

    /// The most frequent value among the rows `train` (the first in sorted order of those
    /// as frequent), what `missing "mean"` and `"median"` fill a missing cell with;
    /// `None` when every one of them is missing.
    pub fn most_frequent(&self, train: &[usize]) -> Option<String> {
        let mut counts = vec![0usize; self.values.len()];
        for &i in train {
            if let Some(c) = counts.get_mut(self.codes[i] as usize) {
                *c += 1;
            }
        }
        (0..self.values.len())
            .filter(|&c| counts[c] > 0)
            .max_by(|&a, &b| {
                counts[a]
                    .cmp(&counts[b])
                    .then_with(|| self.values[b].cmp(&self.values[a]))
            })
            .map(|c| self.values[c].clone())
    }

    /// Fills every missing cell with `value`.
    pub fn fill(&mut self, value: &str) {
        let code = match self.index.get(value) {
            Some(&code) => code,
            None => {
                self.values.push(value.to_string());
                self.index
                    .insert(value.to_string(), self.values.len() as u32 - 1);
                self.values.len() as u32 - 1
            }
        };
        for c in &mut self.codes {
            if *c == MISSING {
                *c = code;
            }
        }
    }
}

/// A categorical column's values as the training split holds them (sorted, so that the
/// same data gives the same features), and how they are encoded: what a checkpoint's
/// metadata records, and what another file's column is encoded with.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Vocabulary {
    /// The column's name (the header's, or `column N`).
    pub column: String,
    /// Its place in the file (0-based): where a file without a header has it.
    #[serde(skip)]
    pub index: usize,
    pub encoding: Encoding,
    /// `index`: the model input the ids are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    pub values: Vec<String>,
    /// What a missing cell was filled with (`missing "mean"` or `"median"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<String>,
}

impl Vocabulary {
    /// The values of `column` among the rows `train`, sorted.
    pub fn fit(column: &Categories, train: &[usize], encoding: Encoding) -> Vocabulary {
        let mut seen = vec![false; column.values.len()];
        for &i in train {
            if let Some(s) = seen.get_mut(column.codes[i] as usize) {
                *s = true;
            }
        }
        let mut values: Vec<String> = (0..column.values.len())
            .filter(|&c| seen[c])
            .map(|c| column.values[c].clone())
            .collect();
        values.sort();
        Vocabulary {
            column: column.name.clone(),
            index: column.column,
            encoding,
            input: None,
            values,
            fill: None,
        }
    }

    /// The features (or ids) it gives a sample: one per value one-hot, one by index.
    pub fn width(&self) -> usize {
        match self.encoding {
            Encoding::OneHot => self.values.len(),
            Encoding::Index => 1,
        }
    }

    /// The names of the features it gives: `column=value` one-hot, the column by index.
    pub fn feature_names(&self) -> Vec<String> {
        match self.encoding {
            Encoding::OneHot => self
                .values
                .iter()
                .map(|v| format!("{}={v}", self.column))
                .collect(),
            Encoding::Index => vec![self.column.clone()],
        }
    }

    /// `column`'s rows encoded (row-major, [`Vocabulary::width`] values a row): one-hot
    /// (a value not seen in training, or a missing one, is a row of zeros), or the id
    /// 1 … K of the value (0 for one not seen or missing); and how many rows held a value
    /// not seen in training.
    pub fn encode(&self, column: &Categories) -> (Vec<f32>, usize) {
        let width = self.width();
        let mut out = vec![0f32; column.rows() * width];
        let unseen = self.encode_into(column, &mut out, width, 0);
        (out, unseen)
    }

    /// [`Vocabulary::encode`] into the rows of `out`, each `row_width` values, at
    /// `offset` in each (whose `width()` values must be zeros): so that one-hot blocks
    /// are written straight into the features they join, not into a block each first.
    pub fn encode_into(
        &self,
        column: &Categories,
        out: &mut [f32],
        row_width: usize,
        offset: usize,
    ) -> usize {
        // Each read value's place in the vocabulary.
        let place: Vec<Option<usize>> = column
            .values
            .iter()
            .map(|v| self.values.binary_search(v).ok())
            .collect();
        let mut unseen = 0;
        for (i, &code) in column.codes.iter().enumerate() {
            if code == MISSING {
                continue;
            }
            let Some(k) = place[code as usize] else {
                unseen += 1;
                continue;
            };
            let at = i * row_width + offset;
            match self.encoding {
                Encoding::OneHot => out[at + k] = 1.0,
                Encoding::Index => out[at] = (k + 1) as f32,
            }
        }
        unseen
    }
}

/// A categorical column of `spec`'s data with more values than `data.max-categories`
/// allows, located at the data file (and at the `categorical` node that names it);
/// `rows`: how many rows were read (`None`: all of them).
pub fn too_many(
    spec: &DataSpec,
    path: &Path,
    column: &Categories,
    rows: Option<usize>,
) -> Option<Diagnostic> {
    let count = column.values.len();
    if count as u64 <= spec.max_categories {
        return None;
    }
    let seen = match rows {
        Some(rows) => format!(" in its first {rows} rows"),
        None => String::new(),
    };
    let what = match column.declared {
        Some(_) => "the categorical column",
        None => "the column of text",
    };
    let node = column.declared.and_then(|n| spec.categorical.get(n));
    Some(
        Diagnostic::error(
            "pipeline::data::too_many_categories",
            format!(
                "{}: {what} `{}` holds {count} distinct values{seen}, more than `max-categories {}`: an id or a free text is not a category",
                path.display(),
                column.name,
                spec.max_categories
            ),
        )
        .label_opt(spec.source.span, "data file")
        .label_opt(node.and_then(|n| n.span), "categorical")
        .help(match rows {
            None => format!(
                "leave the column out (list the columns to read in `features`), or allow it: `max-categories {}`",
                count.next_power_of_two().max(count + 1)
            ),
            Some(_) => "leave the column out (list the columns to read in `features`), or allow more values with `max-categories`".to_string(),
        }),
    )
}

/// What the run will make of `table`'s feature columns (the first `rows` of the data, or
/// all of it), for `check`: the numeric features (the parts of dates among them), each
/// column of dates and its parts, each categorical column, its encoding and how many
/// values it holds; `None` when every column is numeric.
pub fn describe(spec: &DataSpec, table: &Table, rows: Option<usize>) -> Option<String> {
    if table.categorical.is_empty() && table.dates.is_empty() {
        return None;
    }
    let dates: Vec<String> = table
        .dates
        .iter()
        .map(|(column, parts)| {
            let parts: Vec<&str> = parts.iter().map(|p| p.as_str()).collect();
            format!("{column} ({})", parts.join(", "))
        })
        .collect();
    let columns: Vec<String> = table
        .categorical
        .iter()
        .map(|c| {
            format!(
                "{} ({}, {} values)",
                c.name,
                c.encoding(&spec.categorical).as_str(),
                c.values.len()
            )
        })
        .collect();
    let numeric = table.feature_names.len();
    let seen = match rows {
        Some(rows) => format!(", as the first {rows} rows show"),
        None => String::new(),
    };
    let mut kinds = Vec::new();
    if !dates.is_empty() {
        kinds.push(format!("dates: {}", dates.join(", ")));
    }
    if !columns.is_empty() {
        kinds.push(format!("categorical: {}", columns.join(", ")));
    }
    Some(format!(
        "{numeric} numeric feature{}; {}{seen}",
        if numeric == 1 { "" } else { "s" },
        kinds.join("; ")
    ))
}

/// The data's first rows as the run reads them (`check`'s glance) when it is a table
/// whose code reads them before the run, and how many rows that is (`None`: all).
pub fn glance(manifest: &Manifest) -> Option<(Table, Option<usize>)> {
    let data = &manifest.data;
    if data.text.is_some() || !data.format.is_table() {
        return None;
    }
    let path = manifest.resolve(&data.source.value);
    if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let code = crate::formats::table(data.format).ok()?;
    let table = code
        .glance_rows(&path, &data.dialect, Layout::of(data))
        .ok()??;
    let rows = (table.rows() >= GLANCE_ROWS).then_some(table.rows());
    Some((table, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(cells: &[Option<&str>]) -> Categories {
        let mut c = Categories::new("island".into(), 2);
        for cell in cells {
            c.push(*cell);
        }
        c
    }

    #[test]
    fn the_vocabulary_is_the_training_rows_values_sorted() {
        let c = column(&[
            Some("Dream"),
            Some("Biscoe"),
            None,
            Some("Torgersen"),
            Some("Dream"),
        ]);
        assert_eq!(c.values, ["Dream", "Biscoe", "Torgersen"]);
        assert_eq!(c.codes, [0, 1, MISSING, 2, 0]);
        let v = Vocabulary::fit(&c, &[0, 1, 2], Encoding::OneHot);
        assert_eq!(v.values, ["Biscoe", "Dream"]);
        assert_eq!(v.feature_names(), ["island=Biscoe", "island=Dream"]);
    }

    #[test]
    fn one_hot_rows_and_ids_with_unseen_values_counted() {
        let c = column(&[Some("Dream"), Some("Biscoe"), None, Some("Torgersen")]);
        let v = Vocabulary::fit(&c, &[0, 1], Encoding::OneHot);
        let (values, unseen) = v.encode(&c);
        assert_eq!(values, [0., 1., 1., 0., 0., 0., 0., 0.]);
        assert_eq!(unseen, 1);
        let ids = Vocabulary {
            encoding: Encoding::Index,
            ..v
        };
        assert_eq!(ids.encode(&c), (vec![2., 1., 0., 0.], 1));
    }

    #[test]
    fn the_most_frequent_training_value_fills_missing_cells() {
        let mut c = column(&[Some("b"), Some("a"), None, Some("b"), Some("a"), Some("c")]);
        // Among rows 0, 1, 3, 4: a and b twice each: the first sorted.
        assert_eq!(c.most_frequent(&[0, 1, 2, 3, 4]).as_deref(), Some("a"));
        assert_eq!(c.most_frequent(&[2]), None);
        c.fill("a");
        assert_eq!(c.value(2), Some("a"));
    }
}
