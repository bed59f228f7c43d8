//! `Accept-Encoding` normalised before it selects a variant, as Fastly and Varnish do: browsers
//! send dozens of spellings of the same wish (`gzip, deflate, br, zstd`, `gzip,deflate,br`,
//! `br;q=1.0, gzip;q=0.8, *;q=0.1`), and with `Vary: Accept-Encoding` (or the field keyed by
//! default) each spelling would be a variant of its own, stored and fetched apart. The request
//! is rewritten, before the lookup and before the origin sees it, to the first coding of a
//! configured preference list the client accepts, else `identity`: at most one variant per
//! listed coding, plus one.

use http::header::{self, HeaderMap, HeaderValue};

/// The coding a client that sent `headers` gets: the first of `preferred` (lower-case tokens) it
/// accepts with a weight above zero, named or through `*` (RFC 9110 §12.5.3), else
/// `"identity"`. A request without the field, or with a member whose weight does not parse,
/// still gets only what it surely accepts: `identity` for the former, the member ignored for
/// the latter.
pub fn choose<'a>(headers: &HeaderMap, preferred: &'a [String]) -> &'a str {
    let mut star: Option<bool> = None;
    // For each preferred coding: the weight the client gave it by name, if any.
    let mut named: Vec<Option<bool>> = vec![None; preferred.len()];
    let mut any = false;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        any = true;
        let Ok(text) = value.to_str() else { continue };
        for member in text.split(',') {
            let mut parts = member.split(';');
            let coding = parts.next().unwrap_or("").trim();
            if coding.is_empty() {
                continue;
            }
            let Some(accepted) = weight(parts) else {
                continue;
            };
            if coding == "*" {
                star.get_or_insert(accepted);
            } else if let Some(i) = preferred
                .iter()
                .position(|p| p.eq_ignore_ascii_case(coding))
            {
                named[i].get_or_insert(accepted);
            }
        }
    }
    if any {
        for (i, p) in preferred.iter().enumerate() {
            if named[i].or(star).unwrap_or(false) {
                return p;
            }
        }
    }
    "identity"
}

/// Whether a member's parameters give it a weight above zero: `q=` with a qvalue (RFC 9110
/// §12.4.2: `0`, `1`, up to three decimals), absent meaning 1. `None` when a weight does not
/// parse (the member is then ignored).
fn weight<'a>(params: impl Iterator<Item = &'a str>) -> Option<bool> {
    for p in params {
        let Some((name, value)) = p.split_once('=') else {
            continue;
        };
        if !name.trim().eq_ignore_ascii_case("q") {
            continue;
        }
        let v = value.trim();
        let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
        let valid = match whole {
            "0" => frac.len() <= 3 && frac.bytes().all(|b| b.is_ascii_digit()),
            "1" => frac.len() <= 3 && frac.bytes().all(|b| b == b'0'),
            _ => false,
        };
        if !valid {
            return None;
        }
        return Some(frac.bytes().any(|b| b != b'0') || whole == "1");
    }
    Some(true)
}

/// Rewrites the request's `Accept-Encoding` to [`choose`]'s answer (one line).
pub fn normalise(headers: &mut HeaderMap, preferred: &[String]) {
    let chosen = choose(headers, preferred);
    if let Ok(v) = HeaderValue::from_str(chosen) {
        headers.insert(header::ACCEPT_ENCODING, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> Vec<String> {
        ["br", "zstd", "gzip"].map(String::from).to_vec()
    }

    fn chosen(lines: &[&str]) -> String {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(header::ACCEPT_ENCODING, HeaderValue::from_str(l).unwrap());
        }
        normalise(&mut h, &list());
        assert_eq!(h.get_all(header::ACCEPT_ENCODING).iter().count(), 1);
        h.get(header::ACCEPT_ENCODING)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn the_best_listed_coding_the_client_accepts() {
        assert_eq!(chosen(&["gzip, deflate, br, zstd"]), "br");
        assert_eq!(chosen(&["gzip, deflate"]), "gzip");
        assert_eq!(chosen(&["GZIP"]), "gzip");
        assert_eq!(chosen(&["zstd;q=0.5, gzip;q=1.0"]), "zstd");
        assert_eq!(chosen(&["gzip", "br"]), "br");
        // Refused by weight, by name or through the wildcard.
        assert_eq!(chosen(&["br;q=0, gzip"]), "gzip");
        assert_eq!(chosen(&["br;q=0.000, zstd;q=0.001"]), "zstd");
        assert_eq!(chosen(&["*;q=0.1"]), "br");
        assert_eq!(chosen(&["*, br;q=0"]), "zstd");
        assert_eq!(chosen(&["*;q=0, gzip"]), "gzip");
        // Nothing listed accepted, nothing sent, or only what does not parse: identity.
        assert_eq!(chosen(&["deflate"]), "identity");
        assert_eq!(chosen(&["identity"]), "identity");
        assert_eq!(chosen(&[""]), "identity");
        assert_eq!(chosen(&[]), "identity");
        assert_eq!(chosen(&["br;q=2, gzip;q=0.5x"]), "identity");
        assert_eq!(chosen(&["gzip;q=1.5"]), "identity");
    }

    #[test]
    fn hostile_fields_become_one_listed_coding_or_identity() {
        // Bytes that are not text, a flood of members, empty members and stray separators,
        // parameters without a value: the origin still gets one token the list names.
        let mut h = HeaderMap::new();
        h.append(
            header::ACCEPT_ENCODING,
            HeaderValue::from_bytes(b"br\xff\xfe, \x80gzip").unwrap(),
        );
        normalise(&mut h, &list());
        assert_eq!(h.get(header::ACCEPT_ENCODING).unwrap(), "identity");
        let flood = format!("{}gzip;q=0.5", "x-junk;q=0.9, ".repeat(2_000));
        assert_eq!(chosen(&[&flood]), "gzip");
        assert_eq!(chosen(&[",,, ;;, br;;q, ;q=1"]), "br");
        assert_eq!(chosen(&["br;q=", "gzip;q"]), "gzip");
        // A line that is not text spoils only itself.
        let mut h = HeaderMap::new();
        h.append(
            header::ACCEPT_ENCODING,
            HeaderValue::from_bytes(b"br\xff").unwrap(),
        );
        h.append(header::ACCEPT_ENCODING, HeaderValue::from_static("zstd"));
        normalise(&mut h, &list());
        assert_eq!(h.get(header::ACCEPT_ENCODING).unwrap(), "zstd");
    }
}
