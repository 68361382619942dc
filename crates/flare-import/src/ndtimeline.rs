//! NDTimeline traces: parquet files of per-op Megatron timelines, as published with
//! ByteDance's what-if straggler analysis (OSDI'25 artifact, `trace-*.parquet`), and their
//! job metadata (`meta-*.yaml`).
//!
//! Columns (any integer width is accepted for the integer columns, 32- or 64-bit floats
//! for times, and plain or dictionary-encoded strings for `optype`): `dp_rank`, `stage`,
//! `rank`, `step`, `optype`, `start_ts` (s), `duration` (s), `seq_id`, `mc`, `mb_id`,
//! `gmc`. Other columns are ignored. Errors name the file and what was wrong; nothing
//! here panics on bad input.

use bytes::Bytes;
use flare_model::ndtimeline::{NdMeta, NdOp, NdOpType, NdTrace};
use parquet::basic::{ConvertedType, LogicalType, Type as PhysicalType};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{ByteArray, DataType};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::types::ColumnDescriptor;
use std::io;
use std::path::{Path, PathBuf};

/// The columns a trace must have.
pub const REQUIRED_COLUMNS: [&str; 11] = [
    "dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "mb_id",
    "gmc",
];

/// Errors reading an NDTimeline trace or its metadata. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum NdTimelineError {
    #[error("{file}: I/O error: {source}")]
    Io {
        file: String,
        #[source]
        source: io::Error,
    },
    #[error("{file}: not a parquet file: {detail}")]
    NotParquet { file: String, detail: String },
    #[error("{file}: not an NDTimeline trace: missing column(s) {}", .columns.join(", "))]
    MissingColumns { file: String, columns: Vec<String> },
    #[error("{file}: column `{column}` has type {found}; expected {expected}")]
    ColumnType {
        file: String,
        column: String,
        found: String,
        expected: &'static str,
    },
    #[error("{file}: corrupt parquet data: {detail}")]
    Corrupt { file: String, detail: String },
    #[error("{file}: row {row}, column `{column}`: {detail}")]
    BadValue {
        file: String,
        row: usize,
        column: String,
        detail: String,
    },
    #[error("{file}: line {line}: {detail}")]
    Meta {
        file: String,
        line: usize,
        detail: String,
    },
    #[error(transparent)]
    Limit(crate::limits::LimitError),
}

crate::limits::limit_error_into!(NdTimelineError, file);

/// Reads a trace and its metadata: `meta-X.yaml` next to `trace-X.parquet` when it exists,
/// otherwise metadata inferred from the trace (sizes from the largest ranks seen, trial
/// name from the file name).
pub fn read_ndtimeline(path: &Path) -> Result<NdTrace, NdTimelineError> {
    let ops = read_ndtimeline_ops(path)?;
    let meta = match meta_path_for(path).filter(|p| p.is_file()) {
        Some(mp) => {
            let file = mp.display().to_string();
            let bytes = crate::limits::read_file(&mp, &Default::default())?;
            let text = String::from_utf8(bytes).map_err(|e| NdTimelineError::Io {
                file: file.clone(),
                source: io::Error::new(io::ErrorKind::InvalidData, e),
            })?;
            parse_nd_meta(&text, &file)?
        }
        None => infer_meta(path, &ops),
    };
    Ok(NdTrace { ops, meta })
}

/// Reads the ops of a parquet trace file.
pub fn read_ndtimeline_ops(path: &Path) -> Result<Vec<NdOp>, NdTimelineError> {
    let file = path.display().to_string();
    let bytes = crate::limits::read_file(path, &Default::default())?;
    read_ndtimeline_bytes(bytes, &file)
}

/// Reads the ops of a parquet trace held in memory; `file` names it in errors.
pub fn read_ndtimeline_bytes(bytes: Vec<u8>, file: &str) -> Result<Vec<NdOp>, NdTimelineError> {
    let bytes = Bytes::from(bytes);
    // The decoder is third-party code fed untrusted bytes: a panic in it becomes an error.
    match std::panic::catch_unwind(|| decode(bytes, file)) {
        Ok(r) => r,
        Err(_) => Err(NdTimelineError::Corrupt {
            file: file.to_string(),
            detail: "the parquet decoder failed on malformed data".to_string(),
        }),
    }
}

/// `dir/trace-X.parquet` -> `dir/meta-X.yaml`.
pub fn meta_path_for(path: &Path) -> Option<PathBuf> {
    let stem = path.file_stem()?.to_str()?;
    let name = stem.strip_prefix("trace-")?;
    Some(path.with_file_name(format!("meta-{name}.yaml")))
}

/// Parses `meta-*.yaml` (flat `key: value` lines). Unknown keys are ignored; sizes
/// default to 1 and must be positive integers.
pub fn parse_nd_meta(text: &str, file: &str) -> Result<NdMeta, NdTimelineError> {
    let mut meta = NdMeta::default();
    let mut world = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() || line == "---" {
            continue;
        }
        let err = |detail: String| NdTimelineError::Meta {
            file: file.to_string(),
            line: i + 1,
            detail,
        };
        let Some((key, value)) = line.split_once(':') else {
            return Err(err(format!("expected `key: value`, found `{line}`")));
        };
        let key = key.trim();
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        let num = || -> Result<u32, NdTimelineError> {
            value.parse::<u32>().map_err(|_| {
                err(format!(
                    "`{key}` must be a non-negative integer, found `{value}`"
                ))
            })
        };
        let size = || -> Result<u32, NdTimelineError> {
            match num()? {
                0 => Err(err(format!("`{key}` must be positive"))),
                n => Ok(n),
            }
        };
        match key {
            "trial_name" => meta.trial_name = value.to_string(),
            "run_id" => meta.run_id = num()?,
            "dp_size" => meta.dp_size = size()?,
            "pp_size" => meta.pp_size = size()?,
            "tp_size" => meta.tp_size = size()?,
            "dsp_size" | "cp_size" => meta.dsp_size = size()?,
            "vpp_size" => meta.vpp_size = size()?,
            "world_size" => world = Some(size()?),
            _ => {}
        }
    }
    let product =
        meta.dp_size as u64 * meta.pp_size as u64 * meta.tp_size as u64 * meta.dsp_size as u64;
    meta.world_size = match world {
        Some(w) if w as u64 != product => {
            return Err(NdTimelineError::Meta {
                file: file.to_string(),
                line: 0,
                detail: format!(
                    "world_size {w} is not dp_size x pp_size x tp_size x dsp_size = {product}"
                ),
            })
        }
        Some(w) => w,
        None => u32::try_from(product).unwrap_or(u32::MAX),
    };
    Ok(meta)
}

fn infer_meta(path: &Path, ops: &[NdOp]) -> NdMeta {
    let trial_name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .map(|s| s.strip_prefix("trace-").unwrap_or(s).to_string())
        .unwrap_or_default();
    let dp = ops.iter().map(|o| o.dp_rank).max().map_or(1, |x| x + 1);
    let pp = ops.iter().map(|o| o.stage).max().map_or(1, |x| x + 1);
    NdMeta {
        trial_name,
        dp_size: dp,
        pp_size: pp,
        world_size: dp * pp,
        ..NdMeta::default()
    }
}

/// What a required column holds, from its parquet type (physical type and annotation):
/// the readers parquet itself has, without a columnar library on top.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ColumnKind {
    /// INT32, signed or unannotated (8, 16 or 32 bits).
    Int32,
    /// INT32 annotated unsigned: the bits are a u32.
    UInt32,
    Int64,
    /// INT64 annotated unsigned: the bits are a u64.
    UInt64,
    Float,
    Double,
    /// BYTE_ARRAY annotated as a string (plain or dictionary-encoded).
    Text,
}

impl ColumnKind {
    fn of(c: &ColumnDescriptor) -> Option<ColumnKind> {
        if c.max_rep_level() > 0 || c.path().parts().len() > 1 {
            return None;
        }
        let logical = c.logical_type_ref();
        let converted = c.converted_type();
        let integer = matches!(logical, None | Some(LogicalType::Integer(_)))
            && matches!(
                converted,
                ConvertedType::NONE
                    | ConvertedType::INT_8
                    | ConvertedType::INT_16
                    | ConvertedType::INT_32
                    | ConvertedType::INT_64
                    | ConvertedType::UINT_8
                    | ConvertedType::UINT_16
                    | ConvertedType::UINT_32
                    | ConvertedType::UINT_64
            );
        let unsigned = matches!(logical, Some(LogicalType::Integer(t)) if !t.is_signed)
            || matches!(
                converted,
                ConvertedType::UINT_8
                    | ConvertedType::UINT_16
                    | ConvertedType::UINT_32
                    | ConvertedType::UINT_64
            );
        let text = matches!(logical, Some(LogicalType::String | LogicalType::Enum))
            || matches!(converted, ConvertedType::UTF8 | ConvertedType::ENUM);
        match c.physical_type() {
            PhysicalType::INT32 if integer && unsigned => Some(ColumnKind::UInt32),
            PhysicalType::INT32 if integer => Some(ColumnKind::Int32),
            PhysicalType::INT64 if integer && unsigned => Some(ColumnKind::UInt64),
            PhysicalType::INT64 if integer => Some(ColumnKind::Int64),
            PhysicalType::FLOAT if logical.is_none() => Some(ColumnKind::Float),
            PhysicalType::DOUBLE if logical.is_none() => Some(ColumnKind::Double),
            PhysicalType::BYTE_ARRAY if text => Some(ColumnKind::Text),
            _ => None,
        }
    }

    fn is_integer(self) -> bool {
        matches!(
            self,
            ColumnKind::Int32 | ColumnKind::UInt32 | ColumnKind::Int64 | ColumnKind::UInt64
        )
    }
}

/// A column's parquet type as a person reads it: `FLOAT`, `INT32 (Date)`, a nested path.
fn describe(c: &ColumnDescriptor) -> String {
    let mut out = c.physical_type().to_string();
    if let Some(l) = c.logical_type_ref() {
        out.push_str(&format!(" ({l:?})"));
    } else if c.converted_type() != ConvertedType::NONE {
        out.push_str(&format!(" ({})", c.converted_type()));
    }
    if c.max_rep_level() > 0 || c.path().parts().len() > 1 {
        out = format!("{out}, nested at {}", c.path().string());
    }
    out
}

fn decode(bytes: Bytes, file: &str) -> Result<Vec<NdOp>, NdTimelineError> {
    let reader = SerializedFileReader::new(bytes).map_err(|e| NdTimelineError::NotParquet {
        file: file.to_string(),
        detail: e.to_string(),
    })?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    // Each required column's leaf: the first whose path starts with the name.
    let leaf = |name: &str| {
        (0..schema.num_columns()).find(|&i| schema.column(i).path().parts()[0] == name)
    };
    let missing: Vec<String> = REQUIRED_COLUMNS
        .iter()
        .filter(|c| leaf(c).is_none())
        .map(|c| c.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(NdTimelineError::MissingColumns {
            file: file.to_string(),
            columns: missing,
        });
    }
    let mut columns = Vec::with_capacity(REQUIRED_COLUMNS.len());
    for name in REQUIRED_COLUMNS {
        let Some(i) = leaf(name) else { continue };
        let descr = schema.column(i);
        let kind = ColumnKind::of(&descr);
        let (ok, expected) = match name {
            "optype" => (
                kind == Some(ColumnKind::Text),
                "a string or dictionary of strings",
            ),
            "start_ts" | "duration" => (
                matches!(kind, Some(ColumnKind::Float | ColumnKind::Double)),
                "a 32- or 64-bit float",
            ),
            _ => (kind.is_some_and(ColumnKind::is_integer), "an integer"),
        };
        match kind {
            Some(kind) if ok => columns.push((i, kind, descr.max_def_level())),
            _ => {
                return Err(NdTimelineError::ColumnType {
                    file: file.to_string(),
                    column: name.to_string(),
                    found: describe(&descr),
                    expected,
                })
            }
        }
    }
    let mut ops = Vec::new();
    for g in 0..reader.num_row_groups() {
        let group = reader.get_row_group(g).map_err(|e| corrupt(file, e))?;
        let rows = usize::try_from(group.metadata().num_rows())
            .map_err(|_| corrupt(file, format!("row group {g} has a negative row count")))?;
        let base = ops.len();
        let place = |k: usize| Place {
            file,
            name: REQUIRED_COLUMNS[k],
            base,
            rows,
            max_def: columns[k].2,
        };
        let read = |k: usize| -> Result<Values, NdTimelineError> {
            let (i, kind, _) = columns[k];
            let column = group.get_column_reader(i).map_err(|e| corrupt(file, e))?;
            values(column, kind, &place(k))
        };
        let int = |k: usize| read(k)?.ints(&place(k));
        let dp_rank = int(0)?;
        let stage = int(1)?;
        let rank = int(2)?;
        let step = int(3)?;
        let seq_id = int(7)?;
        let mc = int(8)?;
        let mb_id = int(9)?;
        let gmc = int(10)?;
        let optype = read(4)?.texts(&place(4))?;
        let start = read(5)?.floats(&place(5))?;
        let duration = read(6)?.floats(&place(6))?;
        let unsigned = |v: i64, row: usize, name: &str| -> Result<u32, NdTimelineError> {
            u32::try_from(v).map_err(|_| NdTimelineError::BadValue {
                file: file.to_string(),
                row: base + row,
                column: name.to_string(),
                detail: format!("{v} is not a valid rank"),
            })
        };
        ops.reserve(rows);
        for i in 0..rows {
            ops.push(NdOp {
                dp_rank: unsigned(dp_rank[i], i, "dp_rank")?,
                stage: unsigned(stage[i], i, "stage")?,
                rank: unsigned(rank[i], i, "rank")?,
                step: step[i],
                optype: optype[i].clone(),
                start_s: start[i],
                duration_s: duration[i],
                seq_id: seq_id[i],
                mc: mc[i],
                mb_id: mb_id[i],
                gmc: gmc[i],
            });
        }
    }
    Ok(ops)
}

/// Where a column's values are: the file, the column, the row group's first row in the
/// file, its rows, and the column's definition level of a present value.
struct Place<'a> {
    file: &'a str,
    name: &'a str,
    base: usize,
    rows: usize,
    max_def: i16,
}

impl Place<'_> {
    fn bad(&self, row: usize, detail: String) -> NdTimelineError {
        NdTimelineError::BadValue {
            file: self.file.to_string(),
            row: self.base + row,
            column: self.name.to_string(),
            detail,
        }
    }

    /// The column's values are not of the type its schema gives.
    fn mismatch(&self) -> NdTimelineError {
        corrupt(
            self.file,
            format!("column `{}` does not hold its schema's type", self.name),
        )
    }
}

/// One column's values over a row group, as stored.
enum Values {
    Int32(Vec<i32>),
    UInt32(Vec<i32>),
    Int64(Vec<i64>),
    UInt64(Vec<i64>),
    Float(Vec<f32>),
    Double(Vec<f64>),
    Text(Vec<ByteArray>),
}

impl Values {
    fn ints(self, at: &Place) -> Result<Vec<i64>, NdTimelineError> {
        Ok(match self {
            Values::Int32(v) => v.into_iter().map(i64::from).collect(),
            // Unsigned columns keep their bits in the signed physical type.
            Values::UInt32(v) => v.into_iter().map(|x| i64::from(x as u32)).collect(),
            Values::Int64(v) => v,
            Values::UInt64(v) => {
                let mut out = Vec::with_capacity(v.len());
                for (i, x) in v.into_iter().enumerate() {
                    let u = x as u64;
                    out.push(i64::try_from(u).map_err(|_| {
                        at.bad(i, format!("{u} does not fit a 64-bit signed integer"))
                    })?);
                }
                out
            }
            _ => return Err(at.mismatch()),
        })
    }

    fn floats(self, at: &Place) -> Result<Vec<f64>, NdTimelineError> {
        let out: Vec<f64> = match self {
            Values::Float(v) => v.into_iter().map(f64::from).collect(),
            Values::Double(v) => v,
            _ => return Err(at.mismatch()),
        };
        if let Some(i) = out.iter().position(|v| !v.is_finite()) {
            return Err(at.bad(i, format!("{} is not a finite number of seconds", out[i])));
        }
        Ok(out)
    }

    fn texts(self, at: &Place) -> Result<Vec<NdOpType>, NdTimelineError> {
        let Values::Text(v) = self else {
            return Err(at.mismatch());
        };
        v.iter()
            .enumerate()
            .map(|(i, b)| match std::str::from_utf8(b.data()) {
                Ok(s) => Ok(NdOpType::parse(s)),
                Err(e) => Err(at.bad(i, format!("not UTF-8 text: {e}"))),
            })
            .collect()
    }
}

/// Reads all of a column chunk's values, as its kind stores them; a null (a value whose
/// definition level is below the column's) is an error naming its row.
fn values(column: ColumnReader, kind: ColumnKind, at: &Place) -> Result<Values, NdTimelineError> {
    fn all<T: DataType>(
        mut r: ColumnReaderImpl<T>,
        at: &Place,
    ) -> Result<Vec<T::T>, NdTimelineError> {
        let mut values = Vec::with_capacity(at.rows);
        let mut defs: Vec<i16> = Vec::new();
        let mut records = 0;
        while records < at.rows {
            let levels = (at.max_def > 0).then_some(&mut defs);
            let (n, _, _) = r
                .read_records(at.rows - records, levels, None, &mut values)
                .map_err(|e| corrupt(at.file, format!("column `{}`: {e}", at.name)))?;
            if n == 0 {
                break;
            }
            records += n;
        }
        if let Some(row) = defs.iter().position(|&d| d < at.max_def) {
            return Err(at.bad(row, "null value".to_string()));
        }
        if records != at.rows || values.len() != at.rows {
            return Err(corrupt(
                at.file,
                format!(
                    "column `{}` holds {} values for a row group of {} rows",
                    at.name,
                    values.len(),
                    at.rows
                ),
            ));
        }
        Ok(values)
    }
    Ok(match (column, kind) {
        (ColumnReader::Int32ColumnReader(r), ColumnKind::Int32) => Values::Int32(all(r, at)?),
        (ColumnReader::Int32ColumnReader(r), ColumnKind::UInt32) => Values::UInt32(all(r, at)?),
        (ColumnReader::Int64ColumnReader(r), ColumnKind::Int64) => Values::Int64(all(r, at)?),
        (ColumnReader::Int64ColumnReader(r), ColumnKind::UInt64) => Values::UInt64(all(r, at)?),
        (ColumnReader::FloatColumnReader(r), ColumnKind::Float) => Values::Float(all(r, at)?),
        (ColumnReader::DoubleColumnReader(r), ColumnKind::Double) => Values::Double(all(r, at)?),
        (ColumnReader::ByteArrayColumnReader(r), ColumnKind::Text) => Values::Text(all(r, at)?),
        _ => return Err(at.mismatch()),
    })
}

fn corrupt(file: &str, e: impl std::fmt::Display) -> NdTimelineError {
    NdTimelineError::Corrupt {
        file: file.to_string(),
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::data_type::{ByteArrayType, DoubleType, FloatType, Int32Type, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// A column's values as written; `None` is a null (the column is then `optional`).
    #[derive(Clone)]
    enum Col {
        I32(Vec<Option<i32>>),
        I64(Vec<Option<i64>>),
        F32(Vec<Option<f32>>),
        F64(Vec<Option<f64>>),
        Text(Vec<Option<&'static str>>),
    }

    fn some<T: Copy>(v: &[T]) -> Vec<Option<T>> {
        v.iter().copied().map(Some).collect()
    }

    /// Writes one column chunk; definition levels only where a value is missing.
    fn put<T: parquet::data_type::DataType>(
        c: &mut parquet::file::writer::SerializedColumnWriter<'_>,
        v: &[Option<T::T>],
    ) where
        T::T: Clone,
    {
        let present: Vec<T::T> = v.iter().flatten().cloned().collect();
        let defs: Vec<i16> = v.iter().map(|x| i16::from(x.is_some())).collect();
        let nullable = v.iter().any(Option::is_none);
        c.typed::<T>()
            .write_batch(&present, nullable.then_some(&defs[..]), None)
            .unwrap();
    }

    /// A two-row trace as pyarrow writes one (narrow integers, float32 times, `optype`
    /// dictionary-encoded), with `changed` columns given another declaration and values
    /// (`"int32 stage (DATE)"`) and the `skip` columns left out.
    fn trace_with(changed: &[(&str, Col)], skip: &[&str]) -> Vec<u8> {
        let mut cols: Vec<(String, Col)> = vec![
            (
                "int32 dp_rank (INTEGER(8,true))".into(),
                Col::I32(some(&[0, 1])),
            ),
            (
                "int32 stage (INTEGER(8,true))".into(),
                Col::I32(some(&[0, 0])),
            ),
            (
                "int32 rank (INTEGER(16,true))".into(),
                Col::I32(some(&[0, 1])),
            ),
            ("int64 step".into(), Col::I64(some(&[7, 7]))),
            (
                "binary optype (STRING)".into(),
                Col::Text(some(&["forward-compute", "optimizer"])),
            ),
            ("float start_ts".into(), Col::F32(some(&[0.5, 1.0]))),
            ("float duration".into(), Col::F32(some(&[0.25, 0.125]))),
            ("int64 seq_id".into(), Col::I64(some(&[0, 0]))),
            ("int32 mc (INTEGER(8,true))".into(), Col::I32(some(&[0, 0]))),
            (
                "int32 mb_id (INTEGER(8,true))".into(),
                Col::I32(some(&[3, 0])),
            ),
            (
                "int32 gmc (INTEGER(16,true))".into(),
                Col::I32(some(&[0, 0])),
            ),
            ("binary extra (STRING)".into(), Col::Text(some(&["x", "y"]))),
        ];
        let name = |decl: &str| decl.split_whitespace().nth(1).unwrap_or("").to_string();
        for (decl, col) in changed {
            let at = cols
                .iter()
                .position(|(d, _)| name(d) == name(decl))
                .unwrap();
            cols[at] = (decl.to_string(), col.clone());
        }
        cols.retain(|(d, _)| !skip.contains(&name(d).as_str()));
        let nullable = |c: &Col| match c {
            Col::I32(v) => v.contains(&None),
            Col::I64(v) => v.contains(&None),
            Col::F32(v) => v.contains(&None),
            Col::F64(v) => v.contains(&None),
            Col::Text(v) => v.contains(&None),
        };
        let fields: Vec<String> = cols
            .iter()
            .map(|(d, c)| {
                let rep = if nullable(c) { "optional" } else { "required" };
                format!("{rep} {d};")
            })
            .collect();
        let schema =
            parse_message_type(&format!("message trace {{ {} }}", fields.join(" "))).unwrap();
        let props = Arc::new(WriterProperties::builder().build());
        let mut out = Vec::new();
        let mut w = SerializedFileWriter::new(&mut out, Arc::new(schema), props).unwrap();
        let mut group = w.next_row_group().unwrap();
        for (_, col) in &cols {
            let mut c = group.next_column().unwrap().unwrap();
            match col {
                Col::I32(v) => put::<Int32Type>(&mut c, v),
                Col::I64(v) => put::<Int64Type>(&mut c, v),
                Col::F32(v) => put::<FloatType>(&mut c, v),
                Col::F64(v) => put::<DoubleType>(&mut c, v),
                Col::Text(v) => {
                    let v: Vec<_> = v.iter().map(|s| s.map(ByteArray::from)).collect();
                    put::<ByteArrayType>(&mut c, &v)
                }
            }
            c.close().unwrap();
        }
        group.close().unwrap();
        w.close().unwrap();
        out
    }

    fn parquet_without(skip: &[&str]) -> Vec<u8> {
        trace_with(&[], skip)
    }

    #[test]
    fn reads_a_written_trace() {
        let ops = read_ndtimeline_bytes(parquet_without(&[]), "t.parquet").unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].optype, NdOpType::ForwardCompute);
        assert_eq!(ops[1].optype, NdOpType::Optimizer);
        assert_eq!(
            (ops[1].dp_rank, ops[1].rank, ops[0].step, ops[0].mb_id),
            (1, 1, 7, 3)
        );
        assert_eq!((ops[0].start_s, ops[0].duration_s), (0.5, 0.25));
    }

    #[test]
    fn missing_columns_are_named() {
        let e =
            read_ndtimeline_bytes(parquet_without(&["gmc", "optype"]), "t.parquet").unwrap_err();
        match &e {
            NdTimelineError::MissingColumns { file, columns } => {
                assert_eq!(file, "t.parquet");
                assert_eq!(columns, &["optype".to_string(), "gmc".to_string()]);
            }
            other => panic!("{other}"),
        }
        let msg = e.to_string();
        assert!(
            msg.contains("t.parquet") && msg.contains("optype, gmc"),
            "{msg}"
        );
    }

    #[test]
    fn each_column_type_is_read_or_named_as_wrong() {
        // (the column changed, what is read or the error's words)
        let cases: Vec<(&str, Col, Result<&str, &str>)> = vec![
            ("float stage", Col::F32(some(&[0.0, 0.0])), Err("column `stage` has type FLOAT; expected an integer")),
            ("int32 stage (DATE)", Col::I32(some(&[0, 0])), Err("column `stage` has type INT32 (Date); expected an integer")),
            ("binary optype", Col::Text(some(&["a", "b"])), Err("column `optype` has type BYTE_ARRAY; expected a string")),
            ("int64 start_ts", Col::I64(some(&[0, 1])), Err("column `start_ts` has type INT64; expected a 32- or 64-bit float")),
            ("int32 rank (INTEGER(32,false))", Col::I32(some(&[0, -1])), Ok("rank 4294967295")),
            ("int64 seq_id (INTEGER(64,false))", Col::I64(some(&[0, -1])), Err("row 1, column `seq_id`: 18446744073709551615 does not fit a 64-bit signed integer")),
            ("int64 step", Col::I64(vec![Some(7), None]), Err("row 1, column `step`: null value")),
            ("double duration", Col::F64(some(&[0.25, f64::NAN])), Err("row 1, column `duration`: NaN is not a finite number of seconds")),
            ("double duration", Col::F64(some(&[0.25, 0.5])), Ok("duration 0.5")),
            ("binary optype (ENUM)", Col::Text(some(&["gc", "optimizer"])), Ok("optype gc")),
        ];
        for (decl, col, want) in cases {
            let got = read_ndtimeline_bytes(trace_with(&[(decl, col)], &[]), "t.parquet");
            match (got, want) {
                (Ok(ops), Ok(what)) => {
                    let seen = format!(
                        "rank {} duration {} optype {}",
                        ops[1].rank,
                        ops[1].duration_s,
                        ops[0].optype.as_str()
                    );
                    assert!(seen.contains(what), "{decl}: {seen}");
                }
                (Err(e), Err(words)) => {
                    let msg = e.to_string();
                    assert!(
                        msg.starts_with("t.parquet: ") && msg.contains(words),
                        "{decl}: {msg}"
                    );
                }
                (got, _) => panic!("{decl}: {got:?}"),
            }
        }
    }

    #[test]
    fn not_parquet() {
        let e = read_ndtimeline_bytes(b"dp_rank,stage\n0,0\n".to_vec(), "x.csv").unwrap_err();
        assert!(matches!(e, NdTimelineError::NotParquet { .. }), "{e}");
        assert!(e.to_string().starts_with("x.csv: not a parquet file"));
        let e = read_ndtimeline_ops(Path::new("/nonexistent/trace-Q.parquet")).unwrap_err();
        assert!(matches!(e, NdTimelineError::Io { .. }));
    }

    #[test]
    fn meta() {
        let m = parse_nd_meta(
            "trial_name: SE\nrun_id: 0\ndp_size: 32\ndsp_size: 2\npp_size: 2\ntp_size: 1\nvpp_size: 1\nworld_size: 128\n",
            "meta-SE.yaml",
        )
        .unwrap();
        assert_eq!(
            (m.dp_size, m.pp_size, m.dsp_size, m.world_size),
            (32, 2, 2, 128)
        );
        assert!(parse_nd_meta("dp_size: 2\nworld_size: 3\n", "m.yaml").is_err());
        let e = parse_nd_meta("dp_size: two\n", "m.yaml").unwrap_err();
        assert!(e.to_string().starts_with("m.yaml: line 1"), "{e}");
        assert_eq!(
            meta_path_for(Path::new("/d/trace-ST.parquet")),
            Some(PathBuf::from("/d/meta-ST.yaml"))
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Arbitrary bytes, and a valid file with bytes flipped or cut, give errors or
        /// ops, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
            cut in any::<usize>(),
        ) {
            let _ = read_ndtimeline_bytes(bytes, "fuzz.parquet");
            let mut good = parquet_without(&[]);
            let n = good.len();
            for (at, b) in flips {
                good[at % n] ^= b;
            }
            good.truncate(cut % (n + 1));
            let _ = read_ndtimeline_bytes(good, "fuzz.parquet");
        }
    }
}
