//! `format "csv"`: read by `table.rs`, with the dialect keys.

use super::TableFormat;
use crate::table::{self, Layout, Table, TableError};
use manifests::formats::{FormatDescription, CSV};
use manifests::Dialect;
use std::path::Path;

pub struct Csv;

impl TableFormat for Csv {
    fn describe(&self) -> &'static FormatDescription {
        &CSV
    }

    fn read(
        &self,
        path: &Path,
        dialect: &Dialect,
        layout: Layout<'_>,
    ) -> Result<Table, TableError> {
        table::read(path, dialect, layout)
    }

    fn peek_features(&self, path: &Path, dialect: &Dialect, layout: Layout<'_>) -> Option<usize> {
        table::peek_features(path, dialect, layout)
    }

    fn glance_rows(
        &self,
        path: &Path,
        dialect: &Dialect,
        layout: Layout<'_>,
    ) -> Result<Option<Table>, TableError> {
        table::glance_rows(path, dialect, layout)
    }
}
