//! Reads query strings from untrusted requests: bounded in length, percent-decoded, and refused when the bytes
//! are not UTF-8.

use percent_encoding::percent_decode_str;

/// Query strings longer than this are refused whole (414).
pub const MAX_QUERY_BYTES: usize = 2048;
/// Search and filter texts longer than this many characters are refused (400).
pub const MAX_TEXT_CHARS: usize = 200;

/// Why a query string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryError {
    TooLong,
    InvalidUtf8,
    ValueTooLong(&'static str),
}

impl QueryError {
    /// The message shown to the client.
    pub fn message(&self) -> String {
        match self {
            QueryError::TooLong => {
                format!("the query string is longer than {MAX_QUERY_BYTES} bytes")
            }
            QueryError::InvalidUtf8 => {
                "the query string is not valid UTF-8 once percent-decoded".into()
            }
            QueryError::ValueTooLong(name) => {
                format!("`{name}` is longer than {MAX_TEXT_CHARS} characters")
            }
        }
    }
}

/// The decoded value of parameter `name` (`+` is a space), or `""` when absent.
pub fn param(query: Option<&str>, name: &'static str) -> Result<String, QueryError> {
    let Some(query) = query else {
        return Ok(String::new());
    };
    if query.len() > MAX_QUERY_BYTES {
        return Err(QueryError::TooLong);
    }
    let mut found = String::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode(key)?;
        if key == name {
            found = decode(value)?;
        }
    }
    if found.chars().count() > MAX_TEXT_CHARS {
        return Err(QueryError::ValueTooLong(name));
    }
    Ok(found.trim().to_string())
}

fn decode(raw: &str) -> Result<String, QueryError> {
    let spaced = raw.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| QueryError::InvalidUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_bounds() {
        assert_eq!(param(Some("a=1&q=conv+2d%21"), "q").unwrap(), "conv 2d!");
        assert_eq!(param(None, "q").unwrap(), "");
        assert_eq!(param(Some("q=%FF"), "q"), Err(QueryError::InvalidUtf8));
        assert_eq!(
            param(Some(&"q=".repeat(2000)), "q"),
            Err(QueryError::TooLong)
        );
        assert_eq!(
            param(Some(&format!("q={}", "a".repeat(201))), "q"),
            Err(QueryError::ValueTooLong("q"))
        );
    }
}
