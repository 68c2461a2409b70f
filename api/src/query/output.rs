//! Answers as JSON (`{"columns", "rows", "truncated"}`), CSV, an Arrow IPC stream, or a table
//! for a terminal.

use super::Answer;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use std::io::Write;

/// How an answer is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"columns":[{"name","type"}],"rows":[[…]],"truncated":bool}`.
    Json,
    /// CSV with a header line.
    Csv,
    /// An Arrow IPC stream.
    Arrow,
    /// A table for a terminal.
    Table,
}

impl Format {
    /// Its media type.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Arrow => "application/vnd.apache.arrow.stream",
            Format::Table => "text/plain; charset=utf-8",
        }
    }
}

/// A rendered answer.
#[derive(Debug)]
pub struct Rendered {
    /// Its media type.
    pub content_type: &'static str,
    /// The bytes.
    pub body: Vec<u8>,
}

/// Times in JSON answers, as elsewhere in the API: RFC 3339, UTC, 9 fraction digits.
const UTC_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.9fZ";
/// Times in CSV and tables: RFC 3339 with the offset.
const TZ_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.9f%:z";

/// Renders `answer` in `format`.
/// `batches` as one Arrow IPC stream of `schema`: an answer in `Format::Arrow`, and what a
/// query's process and the service send each other (`isolated`).
pub(super) fn ipc_stream(
    schema: &datafusion::arrow::datatypes::SchemaRef,
    batches: &[datafusion::arrow::array::RecordBatch],
) -> Result<Vec<u8>, datafusion::arrow::error::ArrowError> {
    let mut out = Vec::new();
    let mut w = datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut out, schema)?;
    for b in batches {
        w.write(b)?;
    }
    w.finish()?;
    drop(w);
    Ok(out)
}

pub fn render(answer: &Answer, format: Format) -> Result<Rendered, String> {
    let body = match format {
        Format::Json => json(answer)?,
        Format::Csv => {
            let mut out = Vec::new();
            let mut w = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .with_timestamp_tz_format(TZ_FORMAT.into())
                .build(&mut out);
            if answer.batches.is_empty() {
                let names: Vec<&str> = answer
                    .schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect();
                drop(w);
                writeln!(out, "{}", names.join(",")).map_err(|e| e.to_string())?;
            } else {
                for b in &answer.batches {
                    w.write(b).map_err(|e| e.to_string())?;
                }
                drop(w);
            }
            out
        }
        Format::Arrow => ipc_stream(&answer.schema, &answer.batches).map_err(|e| e.to_string())?,
        Format::Table => {
            let opts = FormatOptions::default()
                .with_null("NULL")
                .with_timestamp_tz_format(Some(TZ_FORMAT));
            use datafusion::arrow::util::pretty;
            let t = if answer.batches.is_empty() {
                pretty::pretty_format_batches_with_schema(answer.schema.clone(), &[])
                    .map(|t| t.to_string())
            } else {
                pretty::pretty_format_batches_with_options(&answer.batches, &opts)
                    .map(|t| t.to_string())
            }
            .map_err(|e| e.to_string())?;
            format!("{t}\n").into_bytes()
        }
    };
    Ok(Rendered {
        content_type: format.content_type(),
        body,
    })
}

/// A column type's name in a JSON answer.
fn type_name(t: &DataType) -> String {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "string".into(),
        DataType::Boolean => "boolean".into(),
        DataType::Timestamp(..) => "timestamp".into(),
        DataType::Null => "null".into(),
        t if t.is_integer() || t.is_floating() => t.to_string().to_ascii_lowercase(),
        t => t.to_string(),
    }
}

fn is_utc(tz: Option<&str>) -> bool {
    matches!(tz, None | Some("UTC" | "+00:00" | "Z" | "utc"))
}

/// Writes the answer as JSON without building a tree of values (100,000 rows of 20 columns
/// would cost hundreds of megabytes as one).
fn json(answer: &Answer) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(1024);
    let fields = answer.schema.fields();
    out.extend_from_slice(b"{\"columns\":[");
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let col = serde_json::json!({"name": f.name(), "type": type_name(f.data_type())});
        serde_json::to_writer(&mut out, &col).map_err(|e| e.to_string())?;
    }
    out.extend_from_slice(b"],\"rows\":[");
    let utc = FormatOptions::default().with_timestamp_tz_format(Some(UTC_FORMAT));
    let other = FormatOptions::default().with_timestamp_tz_format(Some(TZ_FORMAT));
    let mut first = true;
    for b in &answer.batches {
        let cols = b.columns();
        let formatters = cols
            .iter()
            .map(|c| {
                let opts = match c.data_type() {
                    DataType::Timestamp(_, tz) if !is_utc(tz.as_deref()) => &other,
                    _ => &utc,
                };
                ArrayFormatter::try_new(c.as_ref(), opts).map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..b.num_rows() {
            if !first {
                out.push(b',');
            }
            first = false;
            out.push(b'[');
            for (i, c) in cols.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value(&mut out, c.as_ref(), &formatters[i], row)?;
            }
            out.push(b']');
        }
    }
    out.extend_from_slice(b"],\"truncated\":");
    out.extend_from_slice(if answer.truncated { b"true" } else { b"false" });
    out.push(b'}');
    Ok(out)
}

/// One value: numbers and booleans as such, every other type as its display string.
fn value(
    out: &mut Vec<u8>,
    c: &dyn Array,
    f: &ArrayFormatter<'_>,
    row: usize,
) -> Result<(), String> {
    use datafusion::arrow::datatypes::*;
    if c.is_null(row) {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    macro_rules! num {
        ($t:ty) => {{
            let v = c.as_primitive::<$t>().value(row);
            write!(out, "{v}").map_err(|e| e.to_string())
        }};
    }
    match c.data_type() {
        DataType::Boolean => {
            let v = c.as_boolean().value(row);
            out.extend_from_slice(if v { b"true" } else { b"false" });
            Ok(())
        }
        DataType::Int8 => num!(Int8Type),
        DataType::Int16 => num!(Int16Type),
        DataType::Int32 => num!(Int32Type),
        DataType::Int64 => num!(Int64Type),
        DataType::UInt8 => num!(UInt8Type),
        DataType::UInt16 => num!(UInt16Type),
        DataType::UInt32 => num!(UInt32Type),
        DataType::UInt64 => num!(UInt64Type),
        DataType::Float32 | DataType::Float64 => {
            let v = match c.data_type() {
                DataType::Float32 => f64::from(c.as_primitive::<Float32Type>().value(row)),
                _ => c.as_primitive::<Float64Type>().value(row),
            };
            if v.is_finite() {
                serde_json::to_writer(&mut *out, &v).map_err(|e| e.to_string())
            } else {
                out.extend_from_slice(b"null");
                Ok(())
            }
        }
        DataType::Utf8 => string(out, c.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => string(out, c.as_string::<i64>().value(row)),
        DataType::Utf8View => string(out, c.as_string_view().value(row)),
        _ => string(out, &f.value(row).to_string()),
    }
}

fn string(out: &mut Vec<u8>, s: &str) -> Result<(), String> {
    serde_json::to_writer(out, s).map_err(|e| e.to_string())
}
