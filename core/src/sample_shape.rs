//! The shape of one sample as `pipeline check` can know it without loading the data:
//! from the first line of a CSV file (plain or gzip), so that the model's shapes are
//! checked through the whole network before any run.
//!
//! Honest limitation: only CSV is peeked at today; for NPY, NPZ and safetensors data the
//! shapes are checked by the run's dry pass, once the data is loaded (the data sources of
//! issue 13 will say their shapes before loading). A file that cannot be read gives
//! `None`: reading it is the run's to report, with the file and line.

use flate2::read::MultiGzDecoder;
use manifests::{DataFormat, Manifest};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};

/// The most bytes read before the first line ends (a wider file is left to the run).
const MAX_LINE: u64 = 4 << 20;

/// One sample's shape: the CSV's columns but the label, as a vector.
pub fn of(manifest: &Manifest) -> Option<Vec<i64>> {
    let spec = &manifest.data;
    if spec.format != DataFormat::Csv {
        return None;
    }
    let path = manifest.resolve(&spec.source.value);
    // Regular files only: a FIFO would block `check` (the run refuses it, named).
    if !std::fs::metadata(&path).ok()?.is_file() {
        return None;
    }
    let file = File::open(&path).ok()?;
    let gzip = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    let reader: Box<dyn Read> = if gzip {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    // Whole lines only, up to the limit; a read error (a damaged gzip stream keeps
    // failing) ends the search.
    let mut reader = BufReader::new(reader.take(MAX_LINE));
    let first = loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) if line.last() != Some(&b'\n') => return None,
            Ok(_) => {}
        }
        let line = String::from_utf8(line).ok()?;
        if !line.trim().is_empty() {
            break line;
        }
    };
    let columns = first.trim_end().split(',').count() as i64;
    (columns >= 2).then(|| vec![columns - 1])
}
