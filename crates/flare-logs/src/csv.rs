//! A small CSV reader (RFC 4180: quoted fields with commas, doubled quotes and line
//! breaks), enough for LogHub's structured ground truth files.

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum CsvError {
    #[error("the CSV has no header row")]
    NoHeader,
    #[error("the CSV header has no column {0:?}")]
    NoColumn(String),
    #[error("record {record} has {got} fields, the header {want}")]
    Width {
        record: usize,
        got: usize,
        want: usize,
    },
    #[error("record {0} ends inside a quoted field")]
    OpenQuote(usize),
}

/// All records of `text`, each a list of fields.
pub fn records(text: &str) -> Result<Vec<Vec<String>>, CsvError> {
    let mut out = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    let mut any = false; // the current record has content
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' => {
                quoted = true;
                any = true;
            }
            ',' => {
                record.push(std::mem::take(&mut field));
                any = true;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                if any || !field.is_empty() {
                    record.push(std::mem::take(&mut field));
                    out.push(std::mem::take(&mut record));
                }
                any = false;
            }
            _ => {
                field.push(c);
                any = true;
            }
        }
    }
    if quoted {
        return Err(CsvError::OpenQuote(out.len()));
    }
    if any || !field.is_empty() {
        record.push(field);
        out.push(record);
    }
    Ok(out)
}

/// The named columns of every data record, in the order asked.
pub fn columns(text: &str, names: &[&str]) -> Result<Vec<Vec<String>>, CsvError> {
    let mut rows = records(text)?.into_iter();
    let header = rows.next().ok_or(CsvError::NoHeader)?;
    let idx: Vec<usize> = names
        .iter()
        .map(|n| {
            header
                .iter()
                .position(|h| h == n)
                .ok_or_else(|| CsvError::NoColumn(n.to_string()))
        })
        .collect::<Result<_, _>>()?;
    rows.enumerate()
        .map(|(i, mut r)| {
            if r.len() != header.len() {
                return Err(CsvError::Width {
                    record: i + 1,
                    got: r.len(),
                    want: header.len(),
                });
            }
            Ok(idx.iter().map(|&j| std::mem::take(&mut r[j])).collect())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_fields() {
        let text =
            "Id,Content,EventId\n1,\"a, b\",E1\r\n2,\"say \"\"hi\"\"\",E2\n3,\"two\nlines\",E3\n";
        let got = columns(text, &["Content", "EventId"]).unwrap();
        assert_eq!(
            got,
            [["a, b", "E1"], ["say \"hi\"", "E2"], ["two\nlines", "E3"]]
        );
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(columns("", &["A"]), Err(CsvError::NoHeader));
        assert_eq!(
            columns("A,B\n1,2\n", &["C"]),
            Err(CsvError::NoColumn("C".into()))
        );
        assert_eq!(
            columns("A,B\n1\n", &["A"]),
            Err(CsvError::Width {
                record: 1,
                got: 1,
                want: 2
            })
        );
        assert_eq!(records("\"open"), Err(CsvError::OpenQuote(0)));
    }

    #[test]
    fn empty_fields_are_kept() {
        assert_eq!(records("a,,\n").unwrap(), [["a", "", ""]]);
    }
}
