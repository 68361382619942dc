//! NDTimeline traces: parquet files of per-op Megatron timelines, as published with
//! ByteDance's what-if straggler analysis (OSDI'25 artifact, `trace-*.parquet`), and their
//! job metadata (`meta-*.yaml`).
//!
//! Columns (any integer width is accepted for the integer columns, 32- or 64-bit floats
//! for times, and plain or dictionary-encoded strings for `optype`): `dp_rank`, `stage`,
//! `rank`, `step`, `optype`, `start_ts` (s), `duration` (s), `seq_id`, `mc`, `mb_id`,
//! `gmc`. Other columns are ignored. Errors name the file and what was wrong; nothing
//! here panics on bad input.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use bytes::Bytes;
use flare_model::ndtimeline::{NdMeta, NdOp, NdOpType, NdTrace};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
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

fn decode(bytes: Bytes, file: &str) -> Result<Vec<NdOp>, NdTimelineError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| {
        NdTimelineError::NotParquet {
            file: file.to_string(),
            detail: e.to_string(),
        }
    })?;
    let schema = builder.schema().clone();
    let missing: Vec<String> = REQUIRED_COLUMNS
        .iter()
        .filter(|c| schema.field_with_name(c).is_err())
        .map(|c| c.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(NdTimelineError::MissingColumns {
            file: file.to_string(),
            columns: missing,
        });
    }
    for c in REQUIRED_COLUMNS {
        let dt = schema
            .field_with_name(c)
            .map(|f| f.data_type().clone())
            .ok();
        let Some(dt) = dt else { continue };
        let (ok, expected) = match c {
            "optype" => (is_string_type(&dt), "a string or dictionary of strings"),
            "start_ts" | "duration" => (
                matches!(dt, DataType::Float32 | DataType::Float64),
                "a 32- or 64-bit float",
            ),
            _ => (dt.is_integer(), "an integer"),
        };
        if !ok {
            return Err(NdTimelineError::ColumnType {
                file: file.to_string(),
                column: c.to_string(),
                found: dt.to_string(),
                expected,
            });
        }
    }
    let reader = builder
        .with_batch_size(65536)
        .build()
        .map_err(|e| corrupt(file, e))?;
    let mut ops = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(file, e))?;
        let col = |name: &str| -> Result<&ArrayRef, NdTimelineError> {
            batch
                .column_by_name(name)
                .ok_or_else(|| NdTimelineError::MissingColumns {
                    file: file.to_string(),
                    columns: vec![name.to_string()],
                })
        };
        let base = ops.len();
        let ints = |name: &str| ints(col(name)?, name, file, base);
        let floats = |name: &str| floats(col(name)?, name, file, base);
        let dp_rank = ints("dp_rank")?;
        let stage = ints("stage")?;
        let rank = ints("rank")?;
        let step = ints("step")?;
        let seq_id = ints("seq_id")?;
        let mc = ints("mc")?;
        let mb_id = ints("mb_id")?;
        let gmc = ints("gmc")?;
        let start = floats("start_ts")?;
        let duration = floats("duration")?;
        let optype = strings(col("optype")?, "optype", file, base)?;
        let unsigned = |v: i64, row: usize, name: &str| -> Result<u32, NdTimelineError> {
            u32::try_from(v).map_err(|_| NdTimelineError::BadValue {
                file: file.to_string(),
                row: base + row,
                column: name.to_string(),
                detail: format!("{v} is not a valid rank"),
            })
        };
        ops.reserve(batch.num_rows());
        for i in 0..batch.num_rows() {
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

fn corrupt(file: &str, e: impl std::fmt::Display) -> NdTimelineError {
    NdTimelineError::Corrupt {
        file: file.to_string(),
        detail: e.to_string(),
    }
}

fn is_string_type(dt: &DataType) -> bool {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(k, v) => {
            k.is_integer() && matches!(**v, DataType::Utf8 | DataType::LargeUtf8)
        }
        _ => false,
    }
}

fn null_error(a: &dyn Array, name: &str, file: &str, base: usize) -> Result<(), NdTimelineError> {
    if a.null_count() > 0 {
        let row = (0..a.len()).find(|&i| a.is_null(i)).unwrap_or(0);
        return Err(NdTimelineError::BadValue {
            file: file.to_string(),
            row: base + row,
            column: name.to_string(),
            detail: "null value".to_string(),
        });
    }
    Ok(())
}

fn ints(a: &ArrayRef, name: &str, file: &str, base: usize) -> Result<Vec<i64>, NdTimelineError> {
    null_error(a.as_ref(), name, file, base)?;
    let out: Vec<i64> = match a.data_type() {
        DataType::Int8 => a
            .as_primitive::<Int8Type>()
            .values()
            .iter()
            .map(|v| *v as i64)
            .collect(),
        DataType::Int16 => a
            .as_primitive::<Int16Type>()
            .values()
            .iter()
            .map(|v| *v as i64)
            .collect(),
        DataType::Int32 => a
            .as_primitive::<Int32Type>()
            .values()
            .iter()
            .map(|v| *v as i64)
            .collect(),
        DataType::Int64 => a.as_primitive::<Int64Type>().values().to_vec(),
        DataType::UInt8 => a
            .as_primitive::<UInt8Type>()
            .values()
            .iter()
            .map(|v| *v as i64)
            .collect(),
        DataType::UInt16 => a
            .as_primitive::<UInt16Type>()
            .values()
            .iter()
            .map(|v| *v as i64)
            .collect(),
        DataType::UInt32 => a
            .as_primitive::<UInt32Type>()
            .values()
            .iter()
            .map(|v| *v as i64)
            .collect(),
        DataType::UInt64 => {
            let vals = a.as_primitive::<UInt64Type>().values();
            let mut out = Vec::with_capacity(vals.len());
            for (i, v) in vals.iter().enumerate() {
                out.push(i64::try_from(*v).map_err(|_| NdTimelineError::BadValue {
                    file: file.to_string(),
                    row: base + i,
                    column: name.to_string(),
                    detail: format!("{v} does not fit a 64-bit signed integer"),
                })?);
            }
            out
        }
        other => {
            return Err(NdTimelineError::ColumnType {
                file: file.to_string(),
                column: name.to_string(),
                found: other.to_string(),
                expected: "an integer",
            })
        }
    };
    Ok(out)
}

fn floats(a: &ArrayRef, name: &str, file: &str, base: usize) -> Result<Vec<f64>, NdTimelineError> {
    null_error(a.as_ref(), name, file, base)?;
    let out: Vec<f64> = match a.data_type() {
        DataType::Float32 => a
            .as_primitive::<Float32Type>()
            .values()
            .iter()
            .map(|v| *v as f64)
            .collect(),
        DataType::Float64 => a.as_primitive::<Float64Type>().values().to_vec(),
        other => {
            return Err(NdTimelineError::ColumnType {
                file: file.to_string(),
                column: name.to_string(),
                found: other.to_string(),
                expected: "a 32- or 64-bit float",
            })
        }
    };
    if let Some(i) = out.iter().position(|v| !v.is_finite()) {
        return Err(NdTimelineError::BadValue {
            file: file.to_string(),
            row: base + i,
            column: name.to_string(),
            detail: format!("{} is not a finite number of seconds", out[i]),
        });
    }
    Ok(out)
}

fn strings(
    a: &ArrayRef,
    name: &str,
    file: &str,
    base: usize,
) -> Result<Vec<NdOpType>, NdTimelineError> {
    null_error(a.as_ref(), name, file, base)?;
    let type_err = |dt: &DataType| NdTimelineError::ColumnType {
        file: file.to_string(),
        column: name.to_string(),
        found: dt.to_string(),
        expected: "a string or dictionary of strings",
    };
    let plain = |a: &dyn Array| -> Option<Vec<NdOpType>> {
        match a.data_type() {
            DataType::Utf8 => Some(
                a.as_string::<i32>()
                    .iter()
                    .map(|s| NdOpType::parse(s.unwrap_or("")))
                    .collect(),
            ),
            DataType::LargeUtf8 => Some(
                a.as_string::<i64>()
                    .iter()
                    .map(|s| NdOpType::parse(s.unwrap_or("")))
                    .collect(),
            ),
            DataType::Utf8View => Some(
                a.as_string_view()
                    .iter()
                    .map(|s| NdOpType::parse(s.unwrap_or("")))
                    .collect(),
            ),
            _ => None,
        }
    };
    if let Some(v) = plain(a.as_ref()) {
        return Ok(v);
    }
    let Some(dict) = a.as_any_dictionary_opt() else {
        return Err(type_err(a.data_type()));
    };
    let values = dict.values();
    let Some(types) = plain(values.as_ref()) else {
        return Err(type_err(a.data_type()));
    };
    let keys = dict.normalized_keys();
    let mut out = Vec::with_capacity(keys.len());
    for (i, k) in keys.iter().enumerate() {
        let t = types.get(*k).ok_or_else(|| NdTimelineError::BadValue {
            file: file.to_string(),
            row: base + i,
            column: name.to_string(),
            detail: format!("dictionary key {k} out of range"),
        })?;
        out.push(t.clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        DictionaryArray, Float32Array, Int16Array, Int64Array, Int8Array, StringArray,
    };
    use arrow::datatypes::{Field, Schema};
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::ArrowWriter;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// A two-row trace with the given columns left out; `optype` as a dictionary.
    fn parquet_without(skip: &[&str], stage_as_float: bool) -> Vec<u8> {
        let mut fields = Vec::new();
        let mut cols: Vec<ArrayRef> = Vec::new();
        let mut add = |name: &str, a: ArrayRef| {
            if !skip.contains(&name) {
                fields.push(Field::new(name, a.data_type().clone(), false));
                cols.push(a);
            }
        };
        add("dp_rank", Arc::new(Int8Array::from(vec![0, 1])));
        if stage_as_float {
            add("stage", Arc::new(Float32Array::from(vec![0.0, 0.0])));
        } else {
            add("stage", Arc::new(Int8Array::from(vec![0, 0])));
        }
        add("rank", Arc::new(Int16Array::from(vec![0, 1])));
        add("step", Arc::new(Int64Array::from(vec![7, 7])));
        let dict: DictionaryArray<Int8Type> =
            vec!["forward-compute", "optimizer"].into_iter().collect();
        add("optype", Arc::new(dict));
        add("start_ts", Arc::new(Float32Array::from(vec![0.5, 1.0])));
        add("duration", Arc::new(Float32Array::from(vec![0.25, 0.125])));
        add("seq_id", Arc::new(Int64Array::from(vec![0, 0])));
        add("mc", Arc::new(Int8Array::from(vec![0, 0])));
        add("mb_id", Arc::new(Int8Array::from(vec![3, 0])));
        add("gmc", Arc::new(Int16Array::from(vec![0, 0])));
        add("extra", Arc::new(StringArray::from(vec!["x", "y"])));
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(schema.clone(), cols).unwrap();
        let mut out = Vec::new();
        let mut w = ArrowWriter::try_new(&mut out, schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        out
    }

    #[test]
    fn reads_a_written_trace() {
        let ops = read_ndtimeline_bytes(parquet_without(&[], false), "t.parquet").unwrap();
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
        let e = read_ndtimeline_bytes(parquet_without(&["gmc", "optype"], false), "t.parquet")
            .unwrap_err();
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
    fn wrong_column_types_are_named() {
        let e = read_ndtimeline_bytes(parquet_without(&[], true), "t.parquet").unwrap_err();
        assert!(
            matches!(&e, NdTimelineError::ColumnType { column, .. } if column == "stage"),
            "{e}"
        );
        assert!(e.to_string().contains("t.parquet"));
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
            let mut good = parquet_without(&[], false);
            let n = good.len();
            for (at, b) in flips {
                good[at % n] ^= b;
            }
            good.truncate(cut % (n + 1));
            let _ = read_ndtimeline_bytes(good, "fuzz.parquet");
        }
    }
}
