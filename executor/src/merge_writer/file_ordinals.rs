//! `FileOrdinals`, the key the copy-on-write writer's changes are sorted
//! by: each data file the target scan reads has a place in the list of
//! those files in path order, and a change's `_file` path becomes that
//! place (a `UInt32`) before the sort and becomes the path again after it.
//! The sort then compares integers and holds, spills and merges 4 bytes a
//! row where the path took about a hundred; the order is the same, the
//! paths' byte order.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, DictionaryArray, StringArray, StringViewArray, UInt32Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, UInt32Type};
use datafusion::error::Result;
use icemerge_proto::error::internal;

use super::merge_rows::file_views;

/// The data files a writer's changes can name, each with its place in
/// path order.
#[derive(Debug)]
pub struct FileOrdinals {
    /// The paths in order; a path's ordinal is its index.
    paths: Arc<StringArray>,
    ordinals: HashMap<String, u32, ahash::RandomState>,
}

impl FileOrdinals {
    /// The ordinals of `files` (any order, duplicates ignored).
    pub fn new(files: impl IntoIterator<Item = String>) -> Result<Self> {
        let mut files: Vec<String> = files.into_iter().collect();
        files.sort_unstable();
        files.dedup();
        let count = u32::try_from(files.len())
            .map_err(|_| internal(format!("{} data files to sort changes by", files.len())))?;
        let ordinals = files.iter().cloned().zip(0..count).collect();
        Ok(Self {
            paths: Arc::new(StringArray::from(files)),
            ordinals,
        })
    }

    /// The paths, in order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.paths.iter().flatten()
    }

    /// The ordinal of each path of `files` (no NULL): a path must be one of
    /// the files.
    pub fn ordinals_of(&self, files: &ArrayRef) -> Result<UInt32Array> {
        let views = file_views(files)?;
        let ordinals = per_path(&views, |path| match path {
            None => Err(internal("a change without a data file to sort by")),
            Some(path) => self.ordinals.get(path).copied().ok_or_else(|| {
                internal(format!(
                    "a change names data file {path}, which the target scan does not read"
                ))
            }),
        })?;
        Ok(UInt32Array::from(ordinals))
    }

    /// The paths of `ordinals`, as an array of `data_type` (a string type).
    pub fn paths_of(&self, ordinals: &UInt32Array, data_type: &DataType) -> Result<ArrayRef> {
        let paths = DictionaryArray::<UInt32Type>::try_new(ordinals.clone(), self.paths.clone())?;
        Ok(cast(&paths, data_type)?)
    }
}

/// `value` of each row's path (None for NULL), looked up once per place:
/// the rows of one file share its path's bytes, so a path longer than a
/// view's inline 12 bytes is looked up once per place in the batch's
/// buffers (length, buffer, offset: the view without its prefix).
pub(crate) fn per_path<T: Copy>(
    views: &StringViewArray,
    mut value: impl FnMut(Option<&str>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut seen: HashMap<u128, T, ahash::RandomState> = HashMap::default();
    let mut values = Vec::with_capacity(views.len());
    for (i, view) in views.views().iter().enumerate() {
        if views.is_null(i) {
            values.push(value(None)?);
            continue;
        }
        let place = if (*view as u32) <= 12 {
            *view
        } else {
            *view & !(u128::from(u32::MAX) << 32)
        };
        let v = match seen.get(&place) {
            Some(v) => *v,
            None => {
                let v = value(Some(views.value(i)))?;
                seen.insert(place, v);
                v
            }
        };
        values.push(v);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, StringViewArray, StringViewBuilder};

    fn ordinals() -> FileOrdinals {
        let long = |n: &str| {
            format!("file:///warehouse/db/t/data/00000-{n}-long-enough-to-be-stored.parquet")
        };
        FileOrdinals::new([long("b"), long("a"), "s.parquet".into(), long("a")]).unwrap()
    }

    #[test]
    fn ordinals_follow_path_order_and_map_back_to_the_paths() {
        let files = ordinals();
        let paths: Vec<&str> = files.paths().collect();
        assert_eq!(paths.len(), 3, "duplicates ignored: {paths:?}");
        assert!(paths.windows(2).all(|w| w[0] < w[1]), "{paths:?}");

        // Views that share a place in one block (as a scan's rows share a
        // path), copies of a path elsewhere, and a short path held inline.
        let mut builder = StringViewBuilder::new();
        let block = builder.append_block(paths.concat().into_bytes().into());
        let (a, b) = (paths[0].len() as u32, paths[1].len() as u32);
        builder.try_append_view(block, 0, a).unwrap();
        builder.append_value(paths[2]);
        builder.try_append_view(block, a, b).unwrap();
        builder.try_append_view(block, 0, a).unwrap();
        builder.append_value(paths[1]);
        builder.try_append_view(block, a, b).unwrap();
        let input: ArrayRef = Arc::new(builder.finish());
        let got = files.ordinals_of(&input).unwrap();
        assert_eq!(got.values().to_vec(), vec![0, 2, 1, 0, 1, 1]);

        for data_type in [DataType::Utf8View, DataType::Utf8] {
            let back = files.paths_of(&got, &data_type).unwrap();
            assert_eq!(back.data_type(), &data_type);
            let back = cast(&back, &DataType::Utf8View).unwrap();
            let back: &StringViewArray = back.as_string_view();
            let back: Vec<&str> = back.iter().flatten().collect();
            let want: Vec<&str> = [0, 2, 1, 0, 1, 1].iter().map(|&i| paths[i]).collect();
            assert_eq!(back, want);
        }
    }

    #[test]
    fn a_path_outside_the_files_or_a_null_is_an_error() {
        let files = ordinals();
        let unknown: ArrayRef = Arc::new(StringViewArray::from(vec![
            "file:///warehouse/db/t/data/other-file-not-read.parquet",
        ]));
        let err = files.ordinals_of(&unknown).unwrap_err().to_string();
        assert!(
            err.contains("other-file-not-read.parquet") && err.contains("does not read"),
            "{err}"
        );
        let null: ArrayRef = Arc::new(StringViewArray::from(vec![None::<&str>]));
        assert!(files.ordinals_of(&null).is_err());
    }
}
