//! Time-series windows (`data.window`): the rows of a table, in their order, cut into
//! samples of `length` consecutive rows, each labelled with the label `horizon` rows after
//! its last row. The windows are split in time order; filling and scaling are fitted on
//! the rows the training windows read. The windows are views of the rows (`unfold`), not
//! copies: memory holds each row once.

use super::{data_error, Dataset, Origin};
use manifests::{DataSpec, Diagnostic, SplitSpec, WindowSpec};
use pipeline_core::split::Splits;
use tch::Tensor;

/// Where the windows of a data set start, and how they and their rows are split.
pub(super) struct Windows {
    spec: WindowSpec,
    /// Each window's first row, in order.
    starts: Vec<usize>,
    /// The windows of each split: the training's first, then val's, then test's.
    pub(super) splits: Splits,
    /// The rows each split's windows read: what filling and scaling are fitted on.
    pub(super) rows: Splits,
}

impl Windows {
    /// The windows over `rows` rows of `spec`'s data: split as `split` says (`None`:
    /// another file applied whole, all of it `test`); `labelled` asks that each window's
    /// label lies in the file (a prediction needs only complete windows).
    pub(super) fn of(
        spec: &DataSpec,
        window: &WindowSpec,
        rows: usize,
        labelled: bool,
        split: Option<&SplitSpec>,
        file: &std::path::Path,
    ) -> Result<Windows, Diagnostic> {
        let starts = window.starts(rows, labelled);
        if starts.is_empty() {
            let label = match labelled {
                true => format!(" and a label {} rows after it", window.horizon),
                false => String::new(),
            };
            return Err(data_error(
                "pipeline::data::no_window",
                spec,
                format!(
                    "{}: {rows} rows make no window of {} rows{label}",
                    file.display(),
                    window.length
                ),
                "give the file more rows, or shorten `window length`",
            ));
        }
        let splits = match split {
            // Unshuffled (the lowering turns `shuffle` off): the training's windows first.
            Some(split) => Splits::new(starts.len(), split),
            None => Splits {
                train: Vec::new(),
                val: Vec::new(),
                test: (0..starts.len()).collect(),
            },
        };
        let read = |windows: &[usize]| {
            let mut read: Vec<usize> = Vec::new();
            for &w in windows {
                let first = starts[w].max(read.last().map_or(0, |&r| r + 1));
                read.extend(first..starts[w] + window.length as usize);
            }
            read
        };
        let rows = Splits {
            train: read(&splits.train),
            val: read(&splits.val),
            test: read(&splits.test),
        };
        Ok(Windows {
            spec: window.clone(),
            starts,
            splits,
            rows,
        })
    }

    /// `values` (rows first) as windows: `windows × length × the row's shape`, a view.
    fn cut(&self, values: &Tensor) -> Tensor {
        let (length, stride) = (self.spec.length as i64, self.spec.stride as i64);
        values
            .unfold(0, length, stride)
            .narrow(0, 0, self.starts.len() as i64)
            .movedim(&[-1][..], &[1][..])
    }
}

impl Dataset {
    /// Turns the rows, filled, scaled and encoded, into the windows' samples: every
    /// model input a window of rows, each window labelled with its label row's label
    /// (`labelled`), named by its last row.
    pub(super) fn cut_windows(&mut self, windows: Windows, labelled: bool) {
        self.window_length = Some(windows.spec.length as i64);
        self.features = windows.cut(&self.features);
        self.sample_shape = self.features.size()[1..].to_vec();
        self.extra = self.extra.iter().map(|t| windows.cut(t)).collect();
        self.ids = self.ids.iter().map(|t| windows.cut(t)).collect();
        if labelled {
            let label_rows: Vec<usize> = windows
                .starts
                .iter()
                .map(|&s| windows.spec.label_row(s))
                .collect();
            self.labels = self
                .labels
                .index_select(0, &super::index_tensor(&label_rows));
        } else {
            self.labels = self.labels.narrow(0, 0, windows.starts.len() as i64);
        }
        let last = |s: usize| s + windows.spec.length as usize - 1;
        if let Origin::Lines(lines) = &self.origin {
            self.origin = Origin::Lines(windows.starts.iter().map(|&s| lines[last(s)]).collect());
        }
        self.rows = windows.starts.iter().map(|&s| self.rows[last(s)]).collect();
        self.splits = windows.splits;
    }
}
