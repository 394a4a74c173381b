//! A numeric CSV reader (plain or gzip) that names the file and line of every problem.

use flate2::read::MultiGzDecoder;
use manifests::Column;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The numbers of a CSV file, the label column split off.
#[derive(Debug)]
pub struct CsvTable {
    /// Row-major, `rows × columns` (the label column removed).
    pub features: Vec<f32>,
    pub labels: Vec<f64>,
    pub columns: usize,
    /// The 1-based line of every row, for messages about a sample.
    pub lines: Vec<usize>,
}

/// Why a CSV could not be read; `line` is 1-based.
#[derive(Debug, PartialEq)]
pub enum CsvError {
    Io(String),
    Line { line: usize, message: String },
    Label(String),
}

fn is_gzip(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// The file's text: gzip is read member after member (what `cat a.gz b.gz`, pigz and
/// bgzip write), and anything after the last member that is not one is an error.
fn open(path: &Path) -> std::io::Result<Box<dyn BufRead>> {
    let file = File::open(path)?;
    let reader: Box<dyn Read> = if is_gzip(path) {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Ok(Box::new(BufReader::with_capacity(1 << 16, reader)))
}

pub fn read(path: &Path, header: bool, label: &Column) -> Result<CsvTable, CsvError> {
    let reader = open(path).map_err(|e| CsvError::Io(e.to_string()))?;
    let mut table = CsvTable {
        features: Vec::new(),
        labels: Vec::new(),
        columns: 0,
        lines: Vec::new(),
    };
    let mut width: Option<usize> = None;
    let mut label_index = None;
    for (i, line) in reader.lines().enumerate() {
        let number = i + 1;
        let line = line.map_err(|e| CsvError::Line {
            line: number,
            message: match is_gzip(path) {
                true => format!("cannot read: the gzip data is damaged, or has bytes after its end that are not gzip ({e})"),
                false => format!("cannot read: {e}"),
            },
        })?;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if header && width.is_none() {
            width = Some(cells.len());
            label_index = Some(match label {
                Column::Name(name) => cells
                    .iter()
                    .position(|c| c.trim_matches('"') == name)
                    .ok_or_else(|| {
                        CsvError::Label(format!(
                            "the header has no column `{name}`; it has: {}",
                            cells.join(", ")
                        ))
                    })?,
                other => resolve_index(other, cells.len())?,
            });
            continue;
        }
        let expected = *width.get_or_insert(cells.len());
        if cells.len() != expected {
            return Err(CsvError::Line {
                line: number,
                message: format!("expected {expected} columns, found {}", cells.len()),
            });
        }
        let label_at = match label_index {
            Some(i) => i,
            None => {
                if let Column::Name(name) = label {
                    return Err(CsvError::Label(format!(
                        "label column `{name}` needs a header line: add `header #true`"
                    )));
                }
                let i = resolve_index(label, cells.len())?;
                label_index = Some(i);
                i
            }
        };
        for (c, cell) in cells.iter().enumerate() {
            let value: f64 = cell.parse().map_err(|_| CsvError::Line {
                line: number,
                message: format!("column {} is not a number: `{cell}`", c + 1),
            })?;
            if c == label_at {
                table.labels.push(value);
            } else {
                table.features.push(value as f32);
            }
        }
        table.lines.push(number);
    }
    if table.lines.is_empty() {
        return Err(CsvError::Io("the file has no data rows".into()));
    }
    table.columns = width.unwrap_or(0) - 1;
    Ok(table)
}

fn resolve_index(label: &Column, width: usize) -> Result<usize, CsvError> {
    let index = match label {
        Column::First => 0,
        Column::Last => width.saturating_sub(1),
        Column::Index(i) => *i,
        Column::Name(_) => unreachable!("names are resolved from the header"),
    };
    if width < 2 {
        return Err(CsvError::Label(
            "the file has fewer than 2 columns: a label and at least one feature are needed".into(),
        ));
    }
    if index >= width {
        return Err(CsvError::Label(format!(
            "label column {index} does not exist: rows have {width} columns (0 … {})",
            width - 1
        )));
    }
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("pipeline-csv-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn reads_numbers_and_splits_off_the_label() {
        let path = write("ok.csv", "a,b,y\n1,2,0\n3,4,1\n");
        let t = read(&path, true, &Column::Name("y".into())).unwrap();
        assert_eq!(t.features, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.labels, vec![0.0, 1.0]);
        assert_eq!(t.columns, 2);
        assert_eq!(t.lines, vec![2, 3]);
        let t = read(&path, true, &Column::First).unwrap();
        assert_eq!(t.labels, vec![1.0, 3.0]);
    }

    fn gzip(text: &str) -> Vec<u8> {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(text.as_bytes()).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn reads_every_member_of_a_gzip_file_and_refuses_trailing_garbage() {
        // `cat a.gz b.gz`: two members, one file.
        let mut bytes = gzip("1,2,0\n3,4,1\n");
        bytes.extend(gzip("5,6,0\n"));
        let path = write("members.csv.gz", "");
        std::fs::write(&path, &bytes).unwrap();
        let t = read(&path, false, &Column::Last).unwrap();
        assert_eq!(
            t.labels,
            vec![0.0, 1.0, 0.0],
            "the second member is read too"
        );
        assert_eq!(t.lines, vec![1, 2, 3]);

        bytes.extend_from_slice(b"garbage after the end");
        std::fs::write(&path, &bytes).unwrap();
        let CsvError::Line { line, message } = read(&path, false, &Column::Last).unwrap_err()
        else {
            panic!("expected an error naming the line")
        };
        assert_eq!(line, 4);
        assert!(message.starts_with("cannot read: the gzip data is damaged, or has bytes after its end that are not gzip"), "{message}");
    }

    #[test]
    fn names_the_line_of_a_short_row() {
        let path = write("short.csv", "1,2,0\n3,4,1\n5,6\n");
        assert_eq!(
            read(&path, false, &Column::Last).unwrap_err(),
            CsvError::Line {
                line: 3,
                message: "expected 3 columns, found 2".into()
            }
        );
        let path = write("text.csv", "1,2,0\n3,x,1\n");
        assert_eq!(
            read(&path, false, &Column::Last).unwrap_err(),
            CsvError::Line {
                line: 2,
                message: "column 2 is not a number: `x`".into()
            }
        );
    }
}
