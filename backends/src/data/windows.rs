//! Time-series windows (`data.window`): the rows of a table, in their order, cut into
//! samples of `length` consecutive rows, each labelled with the label `horizon` rows after
//! its last row. The windows are split in time order; filling and scaling are fitted on
//! the rows the training windows read. The windows are views of the rows (`unfold`), not
//! copies: memory holds each row once.

use super::{data_error, Dataset, Origin};
use manifests::{DataSpec, Diagnostic, SplitSpec, WindowSpec};
use pipeline_core::split::Splits;
use pipeline_core::table::TableError;
use tch::Tensor;

/// Where the windows of a data set start, and how they and their rows are split.
pub(super) struct Windows {
    spec: WindowSpec,
    /// The rows in time order (`window.time`), when that is not the file's.
    order: Option<Vec<usize>>,
    /// Each window's first row (its place in time order), in order.
    starts: Vec<usize>,
    /// The windows of each split: the training's first, then val's, then test's.
    pub(super) splits: Splits,
    /// The rows each split's windows read: what filling and scaling are fitted on.
    pub(super) rows: Splits,
}

impl Windows {
    /// The windows over `rows` rows of `spec`'s data, in the order of `window.time`:
    /// split as `split` says (`None`: another file applied whole, all of it `test`);
    /// `labelled` asks that each window's label lies in the file (a prediction needs only
    /// complete windows).
    pub(super) fn of(
        spec: &DataSpec,
        window: &WindowSpec,
        rows: usize,
        labelled: bool,
        split: Option<&SplitSpec>,
        file: &std::path::Path,
    ) -> Result<Windows, Diagnostic> {
        let order = match &window.time {
            Some(time) => Some(time_order(spec, file, time)?),
            None => None,
        };
        let starts = starts(window, rows, labelled);
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
        // The rows read, as indices into the file's rows.
        let in_file = |p: usize| order.as_ref().map_or(p, |o| o[p]);
        let read = |windows: &[usize]| {
            let mut read: Vec<usize> = Vec::new();
            let mut next = 0;
            for &w in windows {
                let first = starts[w].max(next);
                next = starts[w] + window.length as usize;
                read.extend((first..next).map(in_file));
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
            order,
            starts,
            splits,
            rows,
        })
    }

    /// The file's row at place `p` in time order.
    fn in_file(&self, p: usize) -> usize {
        self.order.as_ref().map_or(p, |o| o[p])
    }

    /// `values` (rows first) as windows: `windows × length × the row's shape`, a view
    /// (of the rows, or of a copy of them in time order).
    fn cut(&self, values: &Tensor) -> Tensor {
        let (length, stride) = (self.spec.length as i64, self.spec.stride as i64);
        let ordered = match &self.order {
            Some(order) => values.index_select(0, &super::index_tensor(order)),
            None => values.shallow_clone(),
        };
        ordered
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
                .map(|&s| windows.in_file(label_row(&windows.spec, s)))
                .collect();
            self.labels = self
                .labels
                .index_select(0, &super::index_tensor(&label_rows));
        } else {
            self.labels = self.labels.narrow(0, 0, windows.starts.len() as i64);
        }
        let last = |s: usize| windows.in_file(s + windows.spec.length as usize - 1);
        if let Origin::Lines(lines) = &self.origin {
            self.origin = Origin::Lines(windows.starts.iter().map(|&s| lines[last(s)]).collect());
        }
        self.rows = windows.starts.iter().map(|&s| self.rows[last(s)]).collect();
        self.splits = windows.splits;
    }
}

/// The first row of each window of `window` over `rows` rows (places in time order):
/// those whose label row lies in the file when `labelled`, else every complete window.
fn starts(window: &WindowSpec, rows: usize, labelled: bool) -> Vec<usize> {
    let (length, horizon) = (window.length as usize, window.horizon as usize);
    let needed = length + if labelled { horizon } else { 0 };
    (0..(rows + 1).saturating_sub(needed))
        .step_by(window.stride as usize)
        .collect()
}

/// The place of the label row of the window starting at `start`.
fn label_row(window: &WindowSpec, start: usize) -> usize {
    start + window.length as usize - 1 + window.horizon as usize
}

/// The order of the rows of `spec`'s table `file` by the column `time`.
fn time_order(
    spec: &DataSpec,
    file: &std::path::Path,
    time: &manifests::Spanned<String>,
) -> Result<Vec<usize>, Diagnostic> {
    pipeline_core::table::time_order(file, spec.format, &spec.dialect, &time.value).map_err(|e| {
        let why = match e {
            TableError::Io(m) | TableError::Columns(m) => m,
            TableError::Line { line, message } => format!("line {line}: {message}"),
        };
        Diagnostic::error(
            "pipeline::data::bad_time",
            format!("{}: cannot order the rows by `{}`: {why}", file.display(), time.value),
        )
        .label_opt(time.span, "orders the rows")
        .help("`time` names a column of numbers or dates by its header's name, with a value in every row")
    })
}
