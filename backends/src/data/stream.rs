//! Streamed features (`data.load "stream"`): `.npy` (one file or shards) or Parquet,
//! never read whole. A batch's samples are read with positional reads (`pread`, runs of
//! neighbouring rows coalesced into one read), converted to float32, filled and scaled on
//! the host, by the loader's workers ahead of the math (`loader.rs`).
//!
//! A Parquet file is first decoded, row group by row group and a chunk of rows at a time
//! (`pipeline_core::parquet::read_features`), into an unnamed float32 file next to the
//! run directories (`.pipeline/`, beside the manifest), which is streamed as an `.npy`
//! would be; the kernel removes the file when the run ends, even when it is killed. A
//! sample of a Parquet file cannot be read alone (its values are compressed by page, one
//! page per column), so shuffled batches read from the file itself would decode every
//! page of every column per batch; decoded once, they are read by position, and the
//! samples and their order are the ones the data held in memory gives (what Hugging
//! Face `datasets` does with its Arrow cache). The cost is disk: 4 bytes per value.
//!
//! Before training, two passes read the files block by block: the first finds missing
//! (NaN) and infinite values and the largest value; the second, over the training split
//! only, fits `scale` and `missing "mean"` (per value of a sample, in float64: sums
//! shifted by each block's first value, blocks merged in file order, so the statistics do
//! not depend on the thread count).
//!
//! Why positional reads and not a memory map: the pages of a mapped file that a process
//! touched count in its resident size, so an epoch over a mapped 4 GiB file would end
//! with 4 GiB resident. Read into the batch's own buffer, the file stays in the kernel's
//! page cache, which the kernel gives back under pressure.
//!
//! Honest limitations: the passes before training read every shard in every process
//! (training itself reads only the process's share), and every process decodes a Parquet
//! file for itself; labels and `data.inputs` are held in memory; `missing "median"` and `padding-id` need the values in memory (lowering
//! refuses them with `stream`).

use super::read::Labels;
use super::{data_error, float_batch, input_files, Dataset, Origin};
use manifests::{DataSpec, Diagnostic, Manifest, Missing, Scale};
use pipeline_core::formats::{self, ColumnGroups};
use pipeline_core::npy::Header;
use pipeline_core::shards::{self, Shard, ShardError};
use pipeline_core::table::{self, Layout, TableError};
use rayon::prelude::*;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use tch::Tensor;

/// The element types streaming reads, little-endian, as numpy names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    F32,
    F64,
    F16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl Element {
    fn of(descr: &str) -> Option<Element> {
        Some(match descr {
            "<f4" => Element::F32,
            "<f8" => Element::F64,
            "<f2" => Element::F16,
            "<i8" => Element::I64,
            "<i4" => Element::I32,
            "<i2" => Element::I16,
            "|i1" => Element::I8,
            "|u1" => Element::U8,
            "|b1" => Element::Bool,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Element::F64 | Element::I64 => 8,
            Element::F32 | Element::I32 => 4,
            Element::F16 | Element::I16 => 2,
            Element::I8 | Element::U8 | Element::Bool => 1,
        }
    }

    /// `bytes` (this type, little-endian) as float32 values into `out`, as
    /// `torch.Tensor.float()` converts them.
    fn decode(self, bytes: &[u8], out: &mut [f32]) {
        macro_rules! each {
            ($n:literal, $f:expr) => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact($n)) {
                    *o = $f(b.try_into().expect("chunks of the type's size"));
                }
            };
        }
        match self {
            Element::F32 => each!(4, f32::from_le_bytes),
            Element::F64 => each!(8, |b| f64::from_le_bytes(b) as f32),
            Element::F16 => each!(2, |b| half::f16::from_le_bytes(b).to_f32()),
            Element::I64 => each!(8, |b| i64::from_le_bytes(b) as f32),
            Element::I32 => each!(4, |b| i32::from_le_bytes(b) as f32),
            Element::I16 => each!(2, |b| i16::from_le_bytes(b) as f32),
            Element::I8 => each!(1, |b: [u8; 1]| b[0] as i8 as f32),
            Element::U8 => each!(1, |b: [u8; 1]| b[0] as f32),
            Element::Bool => each!(1, |b: [u8; 1]| (b[0] != 0) as u8 as f32),
        }
    }
}

/// The bytes the passes before training read at once, per thread.
const BLOCK_BYTES: usize = 4 << 20;

/// `.npy` features read per batch.
#[derive(Debug)]
pub struct NpyStream {
    shards: Vec<(Shard, File)>,
    element: Element,
    /// Values per sample.
    width: usize,
    sample_shape: Vec<i64>,
    /// `missing "mean"`: what each value of a sample is filled with when missing.
    fill: Option<Vec<f32>>,
    /// What scaling subtracts from and divides each value of a sample by.
    scaling: Option<(Vec<f32>, Vec<f32>)>,
}

/// What the first pass found, per row of the shards (rows `drop-row` leaves out are
/// still here: what counts is decided once the rows are known).
#[derive(Debug, Default)]
struct Scan {
    /// Rows with a missing value, with the first missing value's column, in order.
    missing: Vec<(usize, usize)>,
    /// Rows with an infinite value, with its column, in order.
    infinite: Vec<(usize, usize)>,
    /// Each row's largest finite value (for the embeddings' id range; -inf for none).
    largest: Vec<f32>,
}

impl Scan {
    /// The column of `row`'s entry in `listed` (rows in order), if it has one.
    fn column(listed: &[(usize, usize)], row: usize) -> Option<usize> {
        let at = listed.binary_search_by_key(&row, |&(r, _)| r).ok()?;
        Some(listed[at].1)
    }
}

/// One value's statistics over the training rows: count of known values, their mean, the
/// sum of their squared deviations from it (Chan et al.'s parallel form), min and max.
#[derive(Debug, Clone, Copy)]
struct Moments {
    n: f64,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
}

impl Moments {
    const NONE: Moments = Moments {
        n: 0.0,
        mean: 0.0,
        m2: 0.0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
    };

    fn merge(self, o: Moments) -> Moments {
        if o.n == 0.0 {
            return self;
        }
        if self.n == 0.0 {
            return o;
        }
        let n = self.n + o.n;
        let delta = o.mean - self.mean;
        Moments {
            n,
            mean: self.mean + delta * o.n / n,
            m2: self.m2 + o.m2 + delta * delta * self.n * o.n / n,
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

impl NpyStream {
    /// The shards' headers, checked to be one data set of a type this reads.
    fn open(shards: Vec<Shard>) -> Result<NpyStream, ShardError> {
        let first = &shards[0];
        let descr = first.header.descr.clone();
        let element = Element::of(&descr).ok_or_else(|| ShardError::Unreadable {
            path: first.path.clone(),
            why: format!("unsupported element type {descr}"),
        })?;
        let sample_shape = first.header.shape[1..].to_vec();
        let width = sample_shape
            .iter()
            .try_fold(1i64, |w, &d| w.checked_mul(d))
            .ok_or_else(|| ShardError::Unreadable {
                path: first.path.clone(),
                why: format!("its header's shape {:?} is too large", first.header.shape),
            })?
            .max(0) as usize;
        let mut opened = Vec::with_capacity(shards.len());
        for shard in shards {
            let unreadable = |why: String| ShardError::Unreadable {
                path: shard.path.clone(),
                why,
            };
            if shard.header.fortran_order {
                return Err(unreadable(
                    "Fortran-ordered arrays are not supported; save with np.ascontiguousarray"
                        .into(),
                ));
            }
            let file = File::open(&shard.path).map_err(|e| unreadable(e.to_string()))?;
            let length = file
                .metadata()
                .map_err(|e| unreadable(e.to_string()))?
                .len();
            let expected = (width as u64)
                .checked_mul(element.size() as u64)
                .and_then(|row| row.checked_mul(shard.rows()))
                .and_then(|data| data.checked_add(shard.header.data_offset))
                .ok_or_else(|| {
                    unreadable(format!(
                        "its header's shape {:?} is too large",
                        shard.header.shape
                    ))
                })?;
            if length < expected {
                return Err(unreadable(format!(
                    "the data ends early: {length} bytes where its header says {expected}"
                )));
            }
            opened.push((shard, file));
        }
        Ok(NpyStream {
            shards: opened,
            element,
            width,
            sample_shape,
            fill: None,
            scaling: None,
        })
    }

    /// A table's features (`layout`'s columns, read by `code` a group of columns at a
    /// time) decoded into an unnamed float32 file in `dir`, and the columns' names.
    /// Memory holds one chunk of rows while decoding.
    fn decode_table(
        code: &dyn ColumnGroups,
        path: &Path,
        layout: Layout<'_>,
        dir: &Path,
        spec: &DataSpec,
    ) -> Result<(NpyStream, Vec<String>), Diagnostic> {
        let cannot_write = |e: std::io::Error| {
            data_error(
                "pipeline::data::decode_failed",
                spec,
                format!(
                    "{}: cannot write its decoded copy in {}: {e}",
                    path.display(),
                    dir.display()
                ),
                "streaming a table needs 4 bytes of disk per value beside the manifest: free some space, or `load \"memory\"`",
            )
        };
        std::fs::create_dir_all(dir).map_err(cannot_write)?;
        let file = tempfile::tempfile_in(dir).map_err(cannot_write)?;
        let table_error = |e| table::diagnostic(spec, path, e, spec.format);
        let (read, groups) = code.groups(path, layout).map_err(table_error)?;
        let width = read.names.len();
        // Wide files are read a group of columns at a time, the groups in parallel, each
        // into its own part of a staging file (its rows × its columns), then interleaved
        // into rows.
        let staging = match groups.len() > 1 {
            true => Some(tempfile::tempfile_in(dir).map_err(cannot_write)?),
            false => None,
        };
        let target = staging.as_ref().unwrap_or(&file);
        let rows = read.rows;
        groups.clone().into_par_iter().try_for_each(|group| {
            let mut out = PositionedWriter::new(target, (rows * group.start) as u64 * 4);
            let mut failed = None;
            let read = code.read_group(path, layout, group, &mut |block| {
                out.write_all(bytemuck::cast_slice(block.values))
                    .map_err(|e| {
                        failed = Some(e);
                        TableError::Io("the decoded copy could not be written".into())
                    })
            });
            if let Some(e) = failed {
                return Err(cannot_write(e));
            }
            read.map_err(table_error)?;
            out.flush().map_err(cannot_write)
        })?;
        if let Some(staging) = staging {
            interleave(&staging, &file, read.rows, width, &groups).map_err(cannot_write)?;
        }
        let shard = Shard {
            path: path.to_path_buf(),
            header: Header {
                descr: "<f4".into(),
                fortran_order: false,
                shape: vec![read.rows as i64, width as i64],
                data_offset: 0,
            },
            first: 0,
        };
        let stream = NpyStream {
            shards: vec![(shard, file)],
            element: Element::F32,
            width,
            sample_shape: vec![width as i64],
            fill: None,
            scaling: None,
        };
        Ok((stream, read.names))
    }

    fn total_rows(&self) -> usize {
        self.shards.iter().map(|(s, _)| s.rows()).sum::<u64>() as usize
    }

    pub fn sample_shape(&self) -> &[i64] {
        &self.sample_shape
    }

    /// The shards, for messages (`Origin::Shards`).
    fn shard_list(&self) -> Vec<Shard> {
        self.shards.iter().map(|(s, _)| s.clone()).collect()
    }

    /// Reads rows `first..first + out.len() / width` (which may span shards) as float32.
    fn read_rows(&self, first: usize, out: &mut [f32], buf: &mut Vec<u8>) -> Result<(), String> {
        let row_bytes = self.width * self.element.size();
        let (mut row, mut done) = (first as u64, 0usize);
        let count = out.len() / self.width.max(1);
        while done < count {
            let at = self
                .shards
                .partition_point(|(s, _)| s.first + s.rows() <= row);
            let (shard, file) = &self.shards[at];
            let here = ((shard.first + shard.rows() - row) as usize).min(count - done);
            let offset = shard.header.data_offset + (row - shard.first) * row_bytes as u64;
            let values = &mut out[done * self.width..(done + here) * self.width];
            let failed = |e: std::io::Error| {
                format!(
                    "{}: cannot read sample {}: {e}",
                    shard.path.display(),
                    row - shard.first
                )
            };
            // Little-endian float32 is read straight into place; other types through `buf`.
            if self.element == Element::F32 && cfg!(target_endian = "little") {
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(values);
                file.read_exact_at(bytes, offset).map_err(failed)?;
            } else {
                buf.resize(here * row_bytes, 0);
                file.read_exact_at(buf, offset).map_err(failed)?;
                self.element.decode(buf, values);
            }
            done += here;
            row += here as u64;
        }
        Ok(())
    }

    /// Rows per block of the passes before training.
    fn block_rows(&self) -> usize {
        (BLOCK_BYTES / (self.width * self.element.size()).max(1)).max(1)
    }

    /// Runs `each` over every block of rows (first row, its values), in parallel; the
    /// results in file order.
    fn blocks<T: Send>(&self, each: impl Fn(usize, &[f32]) -> T + Sync) -> Result<Vec<T>, String> {
        let (total, per) = (self.total_rows(), self.block_rows());
        (0..total.div_ceil(per))
            .into_par_iter()
            .map_init(
                || (Vec::new(), Vec::new()),
                |(buf, values), b| {
                    let first = b * per;
                    let count = per.min(total - first);
                    values.resize(count * self.width, 0f32);
                    self.read_rows(first, values, buf)?;
                    Ok(each(first, values))
                },
            )
            .collect()
    }

    /// The first pass: missing and infinite values, and the largest value.
    fn scan(&self) -> Result<Scan, String> {
        let width = self.width.max(1);
        let blocks = self.blocks(|first, values| {
            let mut scan = Scan::default();
            for (r, row) in values.chunks_exact(width).enumerate() {
                let (mut missing, mut infinite) = (None, None);
                let mut largest = f32::NEG_INFINITY;
                for (j, &v) in row.iter().enumerate() {
                    if v.is_nan() {
                        missing.get_or_insert(j);
                    } else if v.is_infinite() {
                        infinite.get_or_insert(j);
                    } else if v > largest {
                        largest = v;
                    }
                }
                scan.missing.extend(missing.map(|j| (first + r, j)));
                scan.infinite.extend(infinite.map(|j| (first + r, j)));
                scan.largest.push(largest);
            }
            scan
        })?;
        let mut all = Scan::default();
        for b in blocks {
            all.missing.extend(b.missing);
            all.infinite.extend(b.infinite);
            all.largest.extend(b.largest);
        }
        Ok(all)
    }

    /// The second pass: each value's moments over the rows `train` marks (NaN skipped).
    fn fit(&self, train: &[bool]) -> Result<Vec<Moments>, String> {
        let width = self.width;
        let blocks = self.blocks(|first, values| {
            let mut shift: Option<&[f32]> = None;
            let mut sums = vec![(0f64, 0f64, 0f64, f64::INFINITY, f64::NEG_INFINITY); width];
            for (r, row) in values.chunks_exact(width.max(1)).enumerate() {
                if !train[first + r] {
                    continue;
                }
                let c = *shift.get_or_insert(row);
                for ((s, &v), &c) in sums.iter_mut().zip(row).zip(c) {
                    if v.is_nan() {
                        continue;
                    }
                    // A missing shift value: 0 stands in for it (here and below alike).
                    let c = if c.is_nan() { 0.0 } else { c as f64 };
                    let d = v as f64 - c;
                    s.0 += 1.0;
                    s.1 += d;
                    s.2 += d * d;
                    s.3 = s.3.min(v as f64);
                    s.4 = s.4.max(v as f64);
                }
            }
            let c = shift.map(<[f32]>::to_vec);
            sums.iter()
                .enumerate()
                .map(|(j, &(n, s, q, min, max))| {
                    if n == 0.0 {
                        return Moments::NONE;
                    }
                    let c = c.as_ref().map_or(0.0, |c| match c[j].is_nan() {
                        true => 0.0,
                        false => c[j] as f64,
                    });
                    Moments {
                        n,
                        mean: c + s / n,
                        m2: (q - s * s / n).max(0.0),
                        min,
                        max,
                    }
                })
                .collect::<Vec<_>>()
        })?;
        Ok(blocks
            .into_iter()
            .fold(vec![Moments::NONE; width], |all, b| {
                all.into_iter().zip(b).map(|(a, b)| a.merge(b)).collect()
            }))
    }

    /// Samples `samples` as a CPU float batch, filled and scaled; sample `i` is row
    /// `rows[i]` of the shards. Each worker reads its share of the batch, neighbouring
    /// rows in one read.
    pub fn batch(&self, samples: &[usize], rows: &[usize]) -> Result<Tensor, String> {
        let width = self.width.max(1);
        let mut shape = vec![samples.len() as i64];
        shape.extend(&self.sample_shape);
        // Enough tasks for every worker (two each), never more than 32 samples in one.
        let per_task = samples
            .len()
            .div_ceil(rayon::current_num_threads() * 2)
            .clamp(1, 32);
        float_batch(&shape, |values| {
            values
                .par_chunks_mut(per_task * width)
                .zip(samples.par_chunks(per_task))
                .try_for_each_init(Vec::new, |buf, (out, samples)| {
                    let mut order: Vec<(usize, usize)> = samples
                        .iter()
                        .enumerate()
                        .map(|(slot, &i)| (rows[i], slot))
                        .collect();
                    order.sort_unstable();
                    let mut run = 0;
                    while run < order.len() {
                        let mut end = run + 1;
                        while end < order.len() && order[end].0 == order[end - 1].0 + 1 {
                            end += 1;
                        }
                        if end - run == 1 {
                            let slot = order[run].1;
                            self.read_rows(order[run].0, &mut out[slot * width..][..width], buf)?;
                        } else {
                            let mut block = vec![0f32; (end - run) * width];
                            self.read_rows(order[run].0, &mut block, buf)?;
                            for (k, &(_, slot)) in order[run..end].iter().enumerate() {
                                out[slot * width..][..width]
                                    .copy_from_slice(&block[k * width..][..width]);
                            }
                        }
                        run = end;
                    }
                    for row in out.chunks_exact_mut(width) {
                        self.prepare(row);
                    }
                    Ok::<(), String>(())
                })
        })
    }

    /// Fills and scales one sample's values, as the in-memory path does to its tensor
    /// (float32 `(x - shift) / divide`).
    fn prepare(&self, row: &mut [f32]) {
        if self.fill.is_none() && self.scaling.is_none() {
            return;
        }
        if let Some(fill) = &self.fill {
            for (v, &f) in row.iter_mut().zip(fill) {
                if v.is_nan() {
                    *v = f;
                }
            }
        }
        if let Some((shift, divide)) = &self.scaling {
            for ((v, &s), &d) in row.iter_mut().zip(shift).zip(divide) {
                *v = (*v - s) / d;
            }
        }
    }

    /// Value `column` of every sample (sample `i` is row `rows[i]`), filled and scaled,
    /// for the bucketed sampler.
    pub fn column(&self, column: usize, rows: &[usize]) -> Result<Vec<f64>, String> {
        let width = self.width.max(1);
        let mut by_row = vec![f64::NAN; self.total_rows()];
        let blocks = self.blocks(|first, values| {
            let mut row_values = vec![0f32; width];
            let out: Vec<(usize, f64)> = values
                .chunks_exact(width)
                .enumerate()
                .map(|(r, row)| {
                    row_values.copy_from_slice(row);
                    self.prepare(&mut row_values);
                    (first + r, row_values[column] as f64)
                })
                .collect();
            out
        })?;
        for (row, v) in blocks.into_iter().flatten() {
            by_row[row] = v;
        }
        Ok(rows.iter().map(|&r| by_row[r]).collect())
    }
}

/// Buffered writes at a running position of a file shared with other writers (each its
/// own part of it).
struct PositionedWriter<'a> {
    file: &'a File,
    at: u64,
    buffer: Vec<u8>,
}

impl<'a> PositionedWriter<'a> {
    const CAPACITY: usize = 1 << 20;

    fn new(file: &'a File, at: u64) -> Self {
        PositionedWriter {
            file,
            at,
            buffer: Vec::with_capacity(Self::CAPACITY),
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.buffer.len() + bytes.len() > Self::CAPACITY {
            self.flush()?;
        }
        match bytes.len() > Self::CAPACITY {
            true => {
                self.file.write_all_at(bytes, self.at)?;
                self.at += bytes.len() as u64;
            }
            false => self.buffer.extend_from_slice(bytes),
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.write_all_at(&self.buffer, self.at)?;
        self.at += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }
}

/// The values of a staging file written column group after column group (each of
/// `groups`: its rows × its columns, row-major) written to `out` as rows × `width`, a
/// chunk of rows at a time.
fn interleave(
    staging: &File,
    out: &File,
    rows: usize,
    width: usize,
    groups: &[std::ops::Range<usize>],
) -> std::io::Result<()> {
    const CHUNK_VALUES: usize = 1 << 20;
    let chunk = (CHUNK_VALUES / width.max(1)).max(1);
    let mut piece: Vec<f32> = Vec::new();
    let mut rows_out = vec![0f32; chunk * width];
    let mut writer = BufWriter::with_capacity(1 << 20, out);
    for first in (0..rows).step_by(chunk) {
        let n = chunk.min(rows - first);
        for columns in groups {
            let w = columns.len();
            piece.resize(n * w, 0.0);
            let offset = (rows * columns.start + first * w) as u64 * 4;
            staging.read_exact_at(bytemuck::cast_slice_mut(&mut piece), offset)?;
            for (r, values) in piece.chunks_exact(w).enumerate() {
                rows_out[r * width + columns.start..][..w].copy_from_slice(values);
            }
        }
        writer.write_all(bytemuck::cast_slice(&rows_out[..n * width]))?;
    }
    writer.flush()
}

/// A diagnostic for shards that are not one data set (or of a type this cannot read).
fn shard_error(spec: &DataSpec, e: ShardError) -> Diagnostic {
    let (code, help) = e.code_and_help();
    data_error(code, spec, e.to_string(), help)
}

/// A shard that could not be read in a pass before training (it changed since it was
/// opened, or the disk failed).
fn unreadable(spec: &DataSpec, e: String) -> Diagnostic {
    data_error(
        "pipeline::data::unreadable",
        spec,
        e,
        "check the file: it changed or became unreadable",
    )
}

impl Dataset {
    /// Streamed NPY features: the shards opened (not read), the labels and `data.inputs`
    /// read, every value checked, the split made, and scaling and filling fitted on the
    /// training split by the two passes.
    pub(super) fn load_stream(
        manifest: &Manifest,
        classification: bool,
        fold: Option<u64>,
    ) -> Result<Dataset, Diagnostic> {
        let spec = &manifest.data;
        let path = manifest.resolve(&spec.source.value);
        let files = input_files(manifest, "data", &spec.source)?;
        let columns = formats::table(spec.format).ok().and_then(|t| t.columns());
        let (stream, names, origin) = match columns {
            Some(code) => {
                let dir = manifest.base_dir.join(".pipeline");
                let (stream, names) =
                    NpyStream::decode_table(code, &path, Layout::of(spec), &dir, spec)?;
                (stream, names, Origin::Indices)
            }
            // NPY (`load::streams` streams no other).
            None => {
                let shards = shards::open(&files).map_err(|e| shard_error(spec, e))?;
                let stream = NpyStream::open(shards).map_err(|e| shard_error(spec, e))?;
                let names = (0..stream.width).map(|j| format!("feature {j}")).collect();
                let origin = Origin::Shards(stream.shard_list());
                (stream, names, origin)
            }
        };
        let n = stream.total_rows();
        if n == 0 || stream.width == 0 || stream.sample_shape.is_empty() {
            return Err(data_error(
                "pipeline::data::bad_shape",
                spec,
                format!(
                    "{}: features must be an array of shape (samples, …) with at least one sample and one feature, found {n} samples of shape {:?}",
                    path.display(),
                    stream.sample_shape
                ),
                "store one row per sample",
            ));
        }
        let labels = match (&spec.labels_file, columns) {
            (None, Some(code)) => {
                let labels = code
                    .labels(&path, Layout::of(spec))
                    .map_err(|e| table::diagnostic(spec, &path, e, spec.format))?;
                let cells = Labels::Cells {
                    columns: labels.cells,
                    names: labels.names,
                    lines: None,
                    path: path.clone(),
                };
                super::labels_of_count(manifest, cells, n as i64)?
            }
            _ => super::labels_of_file(manifest, n as i64)?,
        };
        let mut dataset = Dataset::skeleton(manifest, origin, n);
        dataset.sample_shape = stream.sample_shape.clone();
        dataset.read_extra_inputs(manifest, n)?;
        let (labels, classes) = dataset.labels_from(labels, spec, classification)?;
        dataset.labels = labels;
        dataset.classes = classes;
        let scan = stream.scan().map_err(|e| unreadable(spec, e))?;
        let mut missing = vec![false; n];
        for &(row, _) in &scan.missing {
            missing[row] = true;
        }
        dataset.stream = Some(stream);
        dataset.missing_values(spec, &names, &Tensor::from_slice(&missing), |d, i| {
            Scan::column(&scan.missing, d.rows[i]).unwrap_or(0)
        })?;
        // Of the rows left (as in memory, where `drop-row` comes first).
        let infinite = (0..dataset.rows.len())
            .find(|&i| Scan::column(&scan.infinite, dataset.rows[i]).is_some());
        if let Some(i) = infinite {
            return Err(data_error(
                "pipeline::data::not_finite",
                spec,
                format!("{}: a feature is infinite", dataset.at(i)),
                "clean the data: every feature must be a finite number",
            ));
        }
        let largest = dataset.rows.iter().map(|&r| scan.largest[r]);
        dataset.largest_streamed = Some(largest.fold(f32::NEG_INFINITY, f32::max) as f64);
        dataset.ids_fit(manifest, 0)?;
        dataset.fold = fold;
        dataset.splits = dataset.own_splits(spec, classification);
        dataset.fit_streamed(spec, &names, !scan.missing.is_empty())?;
        dataset.check_extra_masks(manifest)?;
        dataset.scale_extra_inputs(manifest);
        Ok(dataset)
    }

    /// `missing "mean"` and `scale`, fitted on the training split by the second pass.
    fn fit_streamed(
        &mut self,
        spec: &DataSpec,
        names: &[String],
        any_missing: bool,
    ) -> Result<(), Diagnostic> {
        let fills = spec.missing == Missing::Mean && any_missing;
        let stream = self.stream.as_mut().expect("streamed data");
        if !fills && spec.scale == Scale::None {
            return Ok(());
        }
        let mut train = vec![false; stream.total_rows()];
        for &i in &self.splits.train {
            train[self.rows[i]] = true;
        }
        let moments = stream.fit(&train).map_err(|e| unreadable(spec, e))?;
        let trained = self.splits.train.len() as f64;
        if fills {
            if let Some(j) = moments.iter().position(|m| m.n == 0.0) {
                return Err(data_error(
                    "pipeline::data::missing_value",
                    spec,
                    format!(
                        "{}: feature `{}` (column {j}) is missing from every training sample, so there is nothing to fill it with",
                        self.path.display(),
                        names[j]
                    ),
                    "leave such rows out (`missing \"drop-row\"`)",
                ));
            }
            let fill: Vec<f32> = moments.iter().map(|m| m.mean as f32).collect();
            self.filled = Some(fill.iter().map(|&f| f as f64).collect());
            stream.fill = Some(fill);
        }
        let (shift, divide): (Vec<f32>, Vec<f32>) = match spec.scale {
            Scale::None => return Ok(()),
            // Filled values sit at the mean: they add to the count, not to the spread.
            Scale::Standard => moments
                .iter()
                .map(|m| {
                    let n = if fills { trained } else { m.n };
                    (m.mean as f32, (m.m2 / n.max(1.0)).sqrt() as f32)
                })
                .unzip(),
            Scale::MinMax => moments
                .iter()
                .map(|m| (m.min as f32, (m.max - m.min) as f32))
                .unzip(),
        };
        // Constant features are centred, not divided by zero (as in memory).
        let divide: Vec<f32> = divide
            .into_iter()
            .map(|d| if d > 1e-8 { d } else { 1.0 })
            .collect();
        let listed = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        self.scaling = Some((listed(&shift), listed(&divide)));
        stream.scaling = Some((shift, divide));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_decode_as_torch_converts_them() {
        let mut out = [0f32; 2];
        Element::I64.decode(
            &[
                255, 255, 255, 255, 255, 255, 255, 255, 2, 0, 0, 0, 0, 0, 0, 0,
            ],
            &mut out,
        );
        assert_eq!(out, [-1.0, 2.0]);
        Element::F16.decode(&[0x00, 0x3c, 0x00, 0xc0], &mut out);
        assert_eq!(out, [1.0, -2.0]);
        Element::Bool.decode(&[0, 7], &mut out);
        assert_eq!(out, [0.0, 1.0]);
    }

    #[test]
    fn moments_merge_as_one_pass() {
        let values = [1.0, 2.0, 4.0, 8.0, 16.0];
        let one = |v: &[f64]| {
            let n = v.len() as f64;
            let mean = v.iter().sum::<f64>() / n;
            Moments {
                n,
                mean,
                m2: v.iter().map(|x| (x - mean) * (x - mean)).sum(),
                min: v.iter().cloned().fold(f64::INFINITY, f64::min),
                max: v.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            }
        };
        let merged = one(&values[..2])
            .merge(one(&values[2..]))
            .merge(Moments::NONE);
        let whole = one(&values);
        assert!((merged.mean - whole.mean).abs() < 1e-12);
        assert!((merged.m2 - whole.m2).abs() < 1e-9);
        assert_eq!((merged.min, merged.max), (1.0, 16.0));
    }
}
