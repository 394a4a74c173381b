//! `format "parquet"`: read by `parquet.rs` (the `parquet` crate), its schema and footer
//! told apart before the run, its features streamed a group of columns at a time.

use super::{Block, ColumnGroups, FeatureColumns, LabelColumns, TableFormat};
use crate::parquet;
use crate::table::{Layout, Table, TableError};
use manifests::formats::{FormatDescription, PARQUET};
use manifests::Dialect;
use std::ops::Range;
use std::path::Path;

pub struct Parquet;

impl TableFormat for Parquet {
    fn describe(&self) -> &'static FormatDescription {
        &PARQUET
    }

    fn read(&self, path: &Path, _: &Dialect, layout: Layout<'_>) -> Result<Table, TableError> {
        parquet::read(path, layout)
    }

    fn peek_features(&self, path: &Path, _: &Dialect, layout: Layout<'_>) -> Option<usize> {
        parquet::peek_features(path, layout)
    }

    fn glance(&self, path: &Path) -> Result<(), TableError> {
        parquet::footer_problem(path)
    }

    fn glance_rows(
        &self,
        path: &Path,
        _: &Dialect,
        layout: Layout<'_>,
    ) -> Result<Option<Table>, TableError> {
        parquet::glance_rows(path, layout)
    }

    fn columns(&self) -> Option<&'static dyn ColumnGroups> {
        Some(&Parquet)
    }
}

impl ColumnGroups for Parquet {
    fn shape(&self, path: &Path, layout: Layout<'_>) -> Result<(usize, usize), TableError> {
        parquet::shape(path, layout)
    }

    fn groups(
        &self,
        path: &Path,
        layout: Layout<'_>,
    ) -> Result<(FeatureColumns, Vec<Range<usize>>), TableError> {
        parquet::feature_groups(path, layout)
    }

    fn read_group(
        &self,
        path: &Path,
        layout: Layout<'_>,
        group: Range<usize>,
        each: &mut dyn FnMut(Block<'_>) -> Result<(), TableError>,
    ) -> Result<(), TableError> {
        parquet::read_feature_group(path, layout, group, each)
    }

    fn labels(&self, path: &Path, layout: Layout<'_>) -> Result<LabelColumns, TableError> {
        parquet::read_labels(path, layout)
    }
}
