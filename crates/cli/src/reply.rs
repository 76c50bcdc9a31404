//! Printing replies the way redis-cli does, so output reads the same against
//! Elsa and against Redis.
//!
//! Owns the text form of every RESP2/RESP3 value the `redis` crate decodes:
//! `"quoted"` bulk strings with escapes for non-printable bytes, `(nil)`,
//! `(integer) N`, numbered and nested arrays (`1) …`), `(error) …`, plain
//! status text, and the RESP3 map (`1# k => v`), set (`1~ …`), double,
//! boolean, big number and verbatim types. What a reply *means* for the
//! session (a commit, a conflict) is [`crate::session`]'s business.

use redis::Value;

/// Formats a whole reply; multi-line for aggregates, no trailing newline.
pub fn format_reply(value: &Value) -> String {
    let mut out = String::new();
    render(value, &mut out);
    out
}

/// The text of an error reply without the `(error) ` prefix: code and
/// detail joined back as the server sent them (`ERR unknown command …`,
/// `CONFLICT k`).
pub fn error_text(code: &str, detail: Option<&str>) -> String {
    match detail {
        Some(detail) => format!("{code} {detail}"),
        None => code.to_string(),
    }
}

/// Quotes bytes as redis-cli's `sdscatrepr` does: printable ASCII as is,
/// the usual C escapes, `\xhh` for everything else (UTF-8 included, so
/// what is shown is exactly what is stored).
pub fn quote(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x07 => s.push_str("\\a"),
            0x08 => s.push_str("\\b"),
            0x20..=0x7e => s.push(char::from(b)),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s.push('"');
    s
}

fn render(value: &Value, out: &mut String) {
    match value {
        Value::Nil => out.push_str("(nil)"),
        Value::Int(n) => out.push_str(&format!("(integer) {n}")),
        Value::BulkString(bytes) => out.push_str(&quote(bytes)),
        Value::SimpleString(s) => out.push_str(s),
        Value::Okay => out.push_str("OK"),
        Value::Double(d) => out.push_str(&format!("(double) {d}")),
        Value::Boolean(b) => out.push_str(if *b { "(true)" } else { "(false)" }),
        Value::BigNumber(n) => out.push_str(&format!("(big number) {n}")),
        // Verbatim text (INFO, LATENCY DOCTOR under RESP3) is meant to be
        // read as is, as redis-cli prints it.
        Value::VerbatimString { text, .. } => out.push_str(text),
        Value::ServerError(err) => {
            out.push_str("(error) ");
            out.push_str(&error_text(err.code(), err.details()));
        }
        Value::Array(items) => render_list(items, ')', "(empty array)", out),
        Value::Set(items) => render_list(items, '~', "(empty set)", out),
        Value::Push { data, .. } => render_list(data, ')', "(empty array)", out),
        Value::Attribute { data, .. } => render(data, out),
        Value::Map(pairs) => render_map(pairs, out),
    }
}

/// Column of the end of `out`, where a nested value's later lines align.
fn column(out: &str) -> usize {
    match out.rfind('\n') {
        Some(nl) => out[nl + 1..].chars().count(),
        None => out.chars().count(),
    }
}

fn index_prefix(i: usize, width: usize, mark: char) -> String {
    format!("{:>width$}{mark} ", i + 1)
}

fn digits(n: usize) -> usize {
    n.to_string().len()
}

fn render_list(items: &[Value], mark: char, empty: &str, out: &mut String) {
    if items.is_empty() {
        out.push_str(empty);
        return;
    }
    let indent = column(out);
    let width = digits(items.len());
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&index_prefix(i, width, mark));
        render(item, out);
    }
}

fn render_map(pairs: &[(Value, Value)], out: &mut String) {
    if pairs.is_empty() {
        out.push_str("(empty hash)");
        return;
    }
    let indent = column(out);
    let width = digits(pairs.len());
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&index_prefix(i, width, '#'));
        render(k, out);
        out.push_str(" => ");
        render(v, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn scalars() {
        assert_eq!(format_reply(&Value::Nil), "(nil)");
        assert_eq!(format_reply(&Value::Int(-7)), "(integer) -7");
        assert_eq!(format_reply(&Value::Okay), "OK");
        assert_eq!(format_reply(&Value::SimpleString("PONG".into())), "PONG");
        assert_eq!(format_reply(&bulk("bar")), "\"bar\"");
        assert_eq!(format_reply(&Value::Double(1.5)), "(double) 1.5");
        assert_eq!(format_reply(&Value::Boolean(true)), "(true)");
        assert_eq!(format_reply(&Value::Boolean(false)), "(false)");
    }

    #[test]
    fn strings_escape_non_printables() {
        assert_eq!(quote(b"a\"b\\c\n\r\t"), r#""a\"b\\c\n\r\t""#);
        assert_eq!(quote(&[0, 0x07, 0x08, 0x7f, 0xff]), r#""\x00\a\b\x7f\xff""#);
        // UTF-8 shows its bytes, as in redis-cli.
        assert_eq!(quote("é".as_bytes()), r#""\xc3\xa9""#);
        assert_eq!(quote(b""), "\"\"");
    }

    #[test]
    fn arrays_are_numbered_and_nested() {
        let v = Value::Array(vec![
            bulk("a"),
            Value::Array(vec![bulk("b"), Value::Int(2)]),
            Value::Nil,
        ]);
        assert_eq!(
            format_reply(&v),
            "1) \"a\"\n2) 1) \"b\"\n   2) (integer) 2\n3) (nil)"
        );
    }

    #[test]
    fn wide_arrays_right_align_indices() {
        let v = Value::Array((0..10).map(Value::Int).collect());
        let text = format_reply(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], " 1) (integer) 0");
        assert_eq!(lines[9], "10) (integer) 9");
    }

    #[test]
    fn nested_inside_wide_arrays_align() {
        let mut items: Vec<Value> = (0..9).map(Value::Int).collect();
        items.push(Value::Array(vec![bulk("x"), bulk("y")]));
        let text = format_reply(&Value::Array(items));
        assert!(text.ends_with("10) 1) \"x\"\n    2) \"y\""), "{text}");
    }

    #[test]
    fn empty_aggregates() {
        assert_eq!(format_reply(&Value::Array(vec![])), "(empty array)");
        assert_eq!(format_reply(&Value::Set(vec![])), "(empty set)");
        assert_eq!(format_reply(&Value::Map(vec![])), "(empty hash)");
    }

    #[test]
    fn resp3_map_and_set() {
        let m = Value::Map(vec![
            (bulk("k"), bulk("v")),
            (bulk("n"), Value::Array(vec![Value::Int(1), Value::Int(2)])),
        ]);
        assert_eq!(
            format_reply(&m),
            "1# \"k\" => \"v\"\n2# \"n\" => 1) (integer) 1\n          2) (integer) 2"
        );
        let s = Value::Set(vec![bulk("x"), bulk("y")]);
        assert_eq!(format_reply(&s), "1~ \"x\"\n2~ \"y\"");
    }

    #[test]
    fn errors_inside_arrays() {
        // What EXEC answers when one queued command failed at run time.
        let v: Value = redis::parse_redis_value(b"*2\r\n+OK\r\n-WRONGTYPE bad\r\n").unwrap();
        assert_eq!(format_reply(&v), "1) OK\n2) (error) WRONGTYPE bad");
    }

    #[test]
    fn top_level_errors_keep_code_and_detail() {
        let v = redis::parse_redis_value(b"-CONFLICT k1\r\n").unwrap();
        assert_eq!(format_reply(&v), "(error) CONFLICT k1");
        let v = redis::parse_redis_value(b"-ERR unknown command 'X'\r\n").unwrap();
        assert_eq!(format_reply(&v), "(error) ERR unknown command 'X'");
    }

    #[test]
    fn verbatim_prints_raw() {
        let v = Value::VerbatimString {
            format: redis::VerbatimFormat::Text,
            text: "# Server\nredis_version:7".into(),
        };
        assert_eq!(format_reply(&v), "# Server\nredis_version:7");
    }
}
