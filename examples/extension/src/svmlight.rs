//! `data { source "train.svm" }` (or `format "svmlight"`): the sparse text format of
//! LIBSVM and SVMlight, in which many data sets are published (`<label> <index>:<value>
//! …` a line, absent values zero, `#` comments), read as scikit-learn's
//! `load_svmlight_file` reads it: indices zero-based when a 0 appears, else one-based;
//! a sample as wide as the largest index; the labels as written (class indices, or
//! targets). The lines are parsed by `libsvm-rs`, whose caps keep a hostile file from
//! taking the memory.

use libsvm_rs::io::{load_problem_from_reader_with_options, LoadOptions};
use manifests::{FormatDescription, FormatKind};
use pipeline_core::formats::{Array, FileFormat, Samples};
use std::io::BufRead;
use std::path::Path;

pub struct Svmlight;

static SVMLIGHT: FormatDescription = FormatDescription {
    name: "svmlight",
    title: "SVMlight",
    doc: "LIBSVM / SVMlight sparse text (`<label> <index>:<value> …` a line), read as scikit-learn's `load_svmlight_file` does",
    extensions: &[".svm", ".svmlight", ".libsvm"],
    kind: FormatKind::Samples,
};

/// The largest sample this reads: a million features (about 4 MB a sample).
const MAX_FEATURES: i32 = 1 << 20;

impl FileFormat for Svmlight {
    fn describe(&self) -> &'static FormatDescription {
        &SVMLIGHT
    }

    fn read(&self, path: &Path) -> Result<Samples, String> {
        let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
        // `#` starts a comment (scikit-learn's files begin with one); what is before it on
        // the line is the sample. The line numbers stay the file's.
        let mut text = String::new();
        for line in std::io::BufReader::new(file).lines() {
            let line = line.map_err(|e| e.to_string())?;
            text.push_str(line.split('#').next().unwrap_or(""));
            text.push('\n');
        }
        let options = LoadOptions {
            max_bytes: u64::MAX,
            max_feature_index: MAX_FEATURES,
            ..LoadOptions::default()
        };
        let problem = load_problem_from_reader_with_options(text.as_bytes(), &options)
            .map_err(|e| e.to_string())?;
        let indices = || problem.instances.iter().flatten().map(|n| n.index as usize);
        let zero_based = indices().any(|i| i == 0);
        let width = indices()
            .max()
            .map_or(0, |top| top + usize::from(zero_based));
        let samples = problem.labels.len();
        if samples == 0 || width == 0 {
            return Err("no samples, or no feature in any sample".into());
        }
        let mut features = vec![0f32; samples * width];
        for (row, nodes) in problem.instances.iter().enumerate() {
            for node in nodes {
                let column = node.index as usize - usize::from(!zero_based);
                features[row * width + column] = node.value as f32;
            }
        }
        let labels = problem.labels.iter().map(|&l| l as f32).collect();
        Ok(Samples {
            features: Array::new(features, vec![samples, width])?,
            labels: Some(Array::new(labels, vec![samples])?),
        })
    }
}
