//! Targeted cache-control fields are Structured Field Dictionaries (RFC 9213 §2.1, RFC 8941
//! §3.2): a field that does not parse as one, or whose delta-seconds directives are not
//! non-negative Integers, is ignored as a whole, as though it were absent. This module only
//! checks; [`CacheControl::read`](super::CacheControl::read) then reads the directives.

use http::header::{HeaderMap, HeaderName};

/// Directives whose value must be a non-negative Integer (RFC 9213 §2.1 keeps Cache-Control's
/// directives, with delta-seconds as Integers).
const DELTA_DIRECTIVES: [&str; 4] = [
    "max-age",
    "s-maxage",
    "stale-while-revalidate",
    "stale-if-error",
];

/// Whether every line of field `name` together is a valid Dictionary whose delta directives
/// are non-negative Integers. Lines are joined with commas, as RFC 8941 §4.2 combines them.
/// `Surrogate-Control` predates Structured Fields (Edge Architecture 1.0 writes
/// `max-age=60+30`) and is read as `Cache-Control` is, unchecked.
pub(super) fn targeted_field_is_valid(headers: &HeaderMap, name: &HeaderName) -> bool {
    if name.as_str() == "surrogate-control" {
        return true;
    }
    let mut lines = headers.get_all(name).iter();
    let first = lines.next();
    if lines.next().is_none() {
        // One line (the common case): checked where it lies.
        return first.is_none_or(|v| dictionary_is_valid(v.as_bytes()));
    }
    let mut joined = Vec::new();
    for (i, value) in headers.get_all(name).iter().enumerate() {
        if i > 0 {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(value.as_bytes());
    }
    dictionary_is_valid(&joined)
}

/// RFC 8941 §4.2: leading and trailing spaces dropped, then §4.2.2's Dictionary to the end.
pub(super) fn dictionary_is_valid(input: &[u8]) -> bool {
    let start = input.iter().position(|&b| b != b' ').unwrap_or(input.len());
    let end = input
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(start, |i| i + 1);
    let mut p = Parser {
        s: &input[start..end.max(start)],
        i: 0,
    };
    p.dictionary().is_some()
}

/// What a member's value is, as far as the type check needs.
#[derive(PartialEq)]
enum Value {
    /// An Integer, and whether it is non-negative.
    Integer(bool),
    /// Anything else (Boolean, Decimal, String, Token, Byte Sequence, Date, Display String or an
    /// Inner List).
    Other,
}

/// A cursor over the field's bytes; each method returns `None` at the first error.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn skip(&mut self, ows: bool) {
        while matches!(self.peek(), Some(b' ')) || (ows && self.peek() == Some(b'\t')) {
            self.i += 1;
        }
    }

    /// §4.2.2.
    fn dictionary(&mut self) -> Option<()> {
        if self.s.is_empty() {
            return Some(());
        }
        loop {
            let key = self.key()?;
            let value = if self.eat(b'=') {
                self.item_or_inner_list()?
            } else {
                self.parameters()?;
                Value::Other
            };
            let delta = DELTA_DIRECTIVES.iter().any(|d| d.as_bytes() == key);
            if delta && value != Value::Integer(true) {
                return None;
            }
            self.skip(true);
            if self.peek().is_none() {
                return Some(());
            }
            if !self.eat(b',') {
                return None;
            }
            self.skip(true);
            self.peek()?; // a trailing comma
        }
    }

    /// §4.2.3.3: `( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`.
    fn key(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        match self.peek() {
            Some(b'a'..=b'z' | b'*') => self.i += 1,
            _ => return None,
        }
        while let Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*') = self.peek() {
            self.i += 1;
        }
        Some(&self.s[start..self.i])
    }

    /// §4.2.1.1.
    fn item_or_inner_list(&mut self) -> Option<Value> {
        if !self.eat(b'(') {
            return self.item();
        }
        loop {
            self.skip(false);
            if self.eat(b')') {
                self.parameters()?;
                return Some(Value::Other);
            }
            self.item()?;
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return None;
            }
        }
    }

    /// §4.2.3: a Bare Item and its Parameters.
    fn item(&mut self) -> Option<Value> {
        let v = self.bare_item()?;
        self.parameters()?;
        Some(v)
    }

    /// §4.2.3.2.
    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip(false);
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    /// §4.2.3.1, with RFC 9651's Date (`@`) and Display String (`%"`).
    fn bare_item(&mut self) -> Option<Value> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string().map(|()| Value::Other),
            b'A'..=b'Z' | b'a'..=b'z' | b'*' => {
                self.i += 1;
                while self
                    .peek()
                    .is_some_and(|b| is_tchar(b) || b == b':' || b == b'/')
                {
                    self.i += 1;
                }
                Some(Value::Other)
            }
            b':' => {
                self.i += 1;
                while let Some(b) = self.peek() {
                    self.i += 1;
                    if b == b':' {
                        return Some(Value::Other);
                    }
                    if !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')) {
                        return None;
                    }
                }
                None
            }
            b'?' => {
                self.i += 1;
                (self.eat(b'0') || self.eat(b'1')).then_some(Value::Other)
            }
            b'@' => {
                self.i += 1;
                matches!(self.number()?, Value::Integer(_)).then_some(Value::Other)
            }
            b'%' => {
                self.i += 1;
                self.string().map(|()| Value::Other)
            }
            _ => None,
        }
    }

    /// §4.2.4: an Integer of at most 15 digits, or a Decimal of at most 12 digits, a dot and 1
    /// to 3 more.
    fn number(&mut self) -> Option<Value> {
        let negative = self.eat(b'-');
        let start = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        let whole = self.i - start;
        if whole == 0 {
            return None;
        }
        if !self.eat(b'.') {
            return (whole <= 15).then_some(Value::Integer(!negative));
        }
        let frac_start = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        let frac = self.i - frac_start;
        (whole <= 12 && (1..=3).contains(&frac)).then_some(Value::Other)
    }

    /// §4.2.5: printable ASCII between quotes, `\` escaping only `"` and `\`.
    fn string(&mut self) -> Option<()> {
        if !self.eat(b'"') {
            return None;
        }
        while let Some(b) = self.peek() {
            self.i += 1;
            match b {
                b'"' => return Some(()),
                b'\\' => {
                    if !(self.eat(b'"') || self.eat(b'\\')) {
                        return None;
                    }
                }
                0x20..=0x7e => {}
                _ => return None,
            }
        }
        None
    }
}

/// RFC 9110 §5.6.2's tchar.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::dictionary_is_valid as ok;
    use proptest::prelude::*;

    #[test]
    fn targeted_fields_that_parse_and_type_check() {
        for good in [
            "max-age=3600",
            "max-age=0",
            "max-age=2147483648",
            "max-age=99999999999",
            "foobar, max-age=3600",
            "no-store",
            "private, no-cache",
            "  max-age=60 ,  stale-while-revalidate=30  ",
            "max-age=60;foo=bar, x=\"a\\\"b\", y=:YWJj:, z=?0, w=(1 2 \"x\");q=1, d=1.5, t=a/b:c",
            "",
            "*x=1",
        ] {
            assert!(ok(good.as_bytes()), "{good:?} should be valid");
        }
    }

    #[test]
    fn invalid_structure_or_types_make_the_field_ignored() {
        for bad in [
            "max-age=10000, &&&&&",
            "max-age=\"10000\"",
            "max-age=-1",
            "max-age=1.5",
            "max-age=?1",
            "MaX-aGe=3600",
            "max-age =100",
            "max-age= 100",
            "max-age=60,",
            "max-age=1234567890123456",
            "stale-if-error=abc",
            "x=\"unterminated",
            "x=:not base64!:",
            "x=(1 2",
            "x=1.2345",
            ",max-age=1",
        ] {
            assert!(!ok(bad.as_bytes()), "{bad:?} should be invalid");
        }
    }

    proptest! {
        /// Any bytes: an answer, never a panic.
        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = ok(&input);
        }

        /// Dictionaries written from valid parts always parse.
        #[test]
        fn generated_dictionaries_parse(
            members in proptest::collection::vec(
                ("[a-z*][a-z0-9_.*-]{0,6}", prop_oneof![
                    Just(String::new()),
                    (0u64..1_000_000_000).prop_map(|n| format!("={n}")),
                    "[a-zA-Z*][a-zA-Z0-9:/!#]{0,5}".prop_map(|t| format!("={t}")),
                    "[ -!#-\\[\\]-~]{0,8}".prop_map(|s| format!("=\"{s}\"")),
                ]),
                1..6,
            )
        ) {
            let field: Vec<String> = members
                .iter()
                .map(|(k, v)| {
                    // A delta directive gets an Integer, as it must.
                    if super::DELTA_DIRECTIVES.contains(&k.as_str()) {
                        format!("{k}=5")
                    } else {
                        format!("{k}{v}")
                    }
                })
                .collect();
            let field = field.join(", ");
            prop_assert!(ok(field.as_bytes()), "{field:?}");
        }
    }
}
