//! Content negotiation in the cache key (RFC 9111 §4.1): the fields a response varies on, and
//! the key of one variant, made from the request's values of those fields after normalisation
//! (whitespace, and letter case where the field is case-insensitive), as the origin received
//! them.

use http::header::{self, HeaderMap, HeaderName};

/// Request fields whose values compare without regard to case (RFC 9110 §12.5).
const CASE_INSENSITIVE: [HeaderName; 4] = [
    header::ACCEPT,
    header::ACCEPT_CHARSET,
    header::ACCEPT_ENCODING,
    header::ACCEPT_LANGUAGE,
];

/// The field names a response varies on (lower-case, sorted, once each), empty if none.
pub fn vary_fields(headers: &HeaderMap) -> Vec<HeaderName> {
    let mut fields: Vec<HeaderName> = headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .filter_map(|f| HeaderName::from_bytes(f.trim().as_bytes()).ok())
        .collect();
    fields.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    fields.dedup();
    fields
}

/// The key of one variant: the primary key plus, for each field the response varies on, the
/// request's values of it. `request` must be the headers the origin received (after hop-by-hop
/// removal), so that a variant is keyed on what selected it. Values are normalised: the list
/// members of every line, trimmed, joined by `,`, spaces around `;` and `=` removed, and lower-
/// cased for the `Accept*` fields; then keyed on their bytes, so a value that is not text is its
/// own key. An absent field matches only an absent field.
pub fn variant_key(primary: &str, fields: &[HeaderName], request: &HeaderMap) -> String {
    if fields.is_empty() {
        return primary.to_string();
    }
    let mut key = String::from(primary);
    for f in fields {
        key.push('\n');
        key.push_str(f.as_str());
        let mut values = request.get_all(f).iter().peekable();
        if values.peek().is_none() {
            key.push('!');
            continue;
        }
        key.push(':');
        let fold = CASE_INSENSITIVE.contains(f);
        let mut first = true;
        for v in values {
            for member in v.as_bytes().split(|&b| b == b',') {
                let member = trim(member);
                if member.is_empty() {
                    continue;
                }
                if !first {
                    key.push(',');
                }
                first = false;
                push_member(&mut key, member, fold);
            }
        }
    }
    key
}

fn trim(v: &[u8]) -> &[u8] {
    let ows = |b: &u8| matches!(b, b' ' | b'\t');
    let start = v.iter().position(|b| !ows(b)).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !ows(b)).map_or(start, |e| e + 1);
    &v[start..end.max(start)]
}

/// Appends one list member: printable ASCII as it is (lower-cased when `fold`), whitespace next
/// to `;` or `=` dropped, `\\` and every other byte escaped as `\xNN`, so that distinct byte
/// strings give distinct keys.
fn push_member(key: &mut String, member: &[u8], fold: bool) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, &b) in member.iter().enumerate() {
        let ows = matches!(b, b' ' | b'\t');
        let next_to_separator = |j: Option<usize>| {
            j.and_then(|j| member.get(j))
                .is_some_and(|c| matches!(c, b';' | b'='))
        };
        if ows && (next_to_separator(i.checked_sub(1)) || next_to_separator(Some(i + 1))) {
            continue;
        }
        match b {
            b'\\' => key.push_str("\\\\"),
            b' '..=b'~' => key.push(char::from(if fold { b.to_ascii_lowercase() } else { b })),
            _ => {
                key.push_str("\\x");
                key.push(char::from(HEX[usize::from(b >> 4)]));
                key.push(char::from(HEX[usize::from(b & 15)]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn h(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        m
    }

    #[test]
    fn vary_fields_are_sorted_and_once_each() {
        let resp = h(&[
            ("vary", b"Accept-Encoding, accept-language"),
            ("vary", b"accept-encoding"),
        ]);
        assert_eq!(
            vary_fields(&resp),
            vec![header::ACCEPT_ENCODING, header::ACCEPT_LANGUAGE]
        );
    }

    #[test]
    fn variants_differ_by_selecting_values_only() {
        let fields = [header::ACCEPT_ENCODING, header::ACCEPT_LANGUAGE];
        let a = variant_key("k", &fields, &h(&[("accept-encoding", b"gzip")]));
        let b = variant_key("k", &fields, &h(&[("accept-encoding", b"br")]));
        let c = variant_key(
            "k",
            &fields,
            &h(&[("accept-encoding", b"gzip"), ("x-other", b"1")]),
        );
        assert_ne!(a, b);
        assert_eq!(a, c);
        assert_eq!(
            variant_key("k", &[], &h(&[("accept-encoding", b"br")])),
            "k"
        );
    }

    #[test]
    fn values_are_normalised_before_they_key_a_variant() {
        // RFC 9111 §4.1: whitespace and, where the field is case-insensitive, case.
        let f = [header::ACCEPT_LANGUAGE];
        let key = |v: &[u8]| variant_key("k", &f, &h(&[("accept-language", v)]));
        assert_eq!(key(b"en-US, fr;q=0.5"), key(b"EN-us,fr ; q = 0.5"));
        assert_eq!(
            key(b"en, fr"),
            variant_key(
                "k",
                &f,
                &h(&[("accept-language", b"en"), ("accept-language", b" fr ")])
            )
        );
        assert_ne!(key(b"en, fr"), key(b"fr, en"), "order is preference");
        // Case matters for fields not known to be case-insensitive.
        let x = [HeaderName::from_static("x-v")];
        assert_ne!(
            variant_key("k", &x, &h(&[("x-v", b"A")])),
            variant_key("k", &x, &h(&[("x-v", b"a")]))
        );
    }

    #[test]
    fn absent_empty_and_non_text_values_are_distinct() {
        let x = [HeaderName::from_static("x-v")];
        let absent = variant_key("k", &x, &HeaderMap::new());
        let empty = variant_key("k", &x, &h(&[("x-v", b"")]));
        let evil = variant_key("k", &x, &h(&[("x-v", b"\xffEVIL")]));
        let escaped = variant_key("k", &x, &h(&[("x-v", b"\\xffEVIL")]));
        assert_ne!(absent, empty);
        assert_ne!(absent, evil);
        assert_ne!(
            evil, escaped,
            "an escape in the value is not the byte it spells"
        );
    }
}
