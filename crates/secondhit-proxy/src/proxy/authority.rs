//! A request's host, validated and normalised once: the one value the cache key, the route and
//! the `Host` sent to the origin are all built from.
//!
//! RFC 9110 §4.2 / §7.2: `Host = uri-host [ ":" port ]`, where `uri-host` is RFC 3986's `host`: an
//! IP literal in brackets, or a `reg-name` of unreserved characters, percent-encodings and
//! sub-delimiters. Nothing else is a host: no `/`, `?`, `#`, `@`, spaces or control bytes, so a
//! Host can never reach into the path of a cache key (`Host: a.test/static` is refused, not keyed
//! as `http://a.test/static/...`).
//!
//! Normalisation (RFC 3986 §6.2.2 and §6.2.3): letters lower-cased, one trailing dot removed
//! (`a.test.` is `a.test`), an empty port or the scheme's default port removed, a port written
//! without leading zeros, an IPv6 literal written in its canonical form.

use std::fmt;
use std::net::Ipv6Addr;

/// The longest host name accepted (a DNS name is at most 253 characters).
pub const MAX_HOST_LEN: usize = 255;

/// Why a Host (or an absolute-form authority) was refused. Each is a `400 Bad Request`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthorityError {
    /// Empty, or only a port.
    Empty,
    /// `user@host`: userinfo has no place in a Host (RFC 9110 §4.2.4).
    UserInfo,
    /// A byte that no host may contain (the byte).
    BadByte(u8),
    /// A `%` not followed by two hex digits.
    BadPercent,
    /// A port that is not a number from 0 to 65535.
    BadPort,
    /// A bracketed literal that is not an IPv6 address.
    BadIpLiteral,
    /// More than [`MAX_HOST_LEN`] characters.
    TooLong,
    /// An empty label at the end (`a.test..`).
    EmptyLabel,
}

impl AuthorityError {
    /// A short token for `Cache-Status` details and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            AuthorityError::Empty => "host-empty",
            AuthorityError::UserInfo => "host-userinfo",
            AuthorityError::BadByte(_) => "host-bad-byte",
            AuthorityError::BadPercent => "host-bad-percent",
            AuthorityError::BadPort => "host-bad-port",
            AuthorityError::BadIpLiteral => "host-bad-ip-literal",
            AuthorityError::TooLong => "host-too-long",
            AuthorityError::EmptyLabel => "host-empty-label",
        }
    }
}

impl fmt::Display for AuthorityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthorityError::Empty => f.write_str("the host is empty"),
            AuthorityError::UserInfo => f.write_str("a host may not carry user information (@)"),
            AuthorityError::BadByte(b) if b.is_ascii_graphic() => {
                write!(f, "a host may not contain {:?}", char::from(*b))
            }
            AuthorityError::BadByte(b) => write!(f, "a host may not contain the byte 0x{b:02x}"),
            AuthorityError::BadPercent => {
                f.write_str("a % in a host must be followed by two hex digits")
            }
            AuthorityError::BadPort => f.write_str("the port is not a number from 0 to 65535"),
            AuthorityError::BadIpLiteral => {
                f.write_str("the bracketed host is not an IPv6 address")
            }
            AuthorityError::TooLong => {
                write!(f, "the host is longer than {MAX_HOST_LEN} characters")
            }
            AuthorityError::EmptyLabel => f.write_str("the host ends with an empty label"),
        }
    }
}

impl std::error::Error for AuthorityError {}

/// A validated, normalised `host[:port]`.
///
/// # Example
/// ```
/// use secondhit_proxy::proxy::authority::Host;
/// let h = Host::parse(b"CDN.Example.:80", 80).unwrap();
/// assert_eq!(h.as_str(), "cdn.example");
/// assert_eq!(Host::parse(b"[0:0::1]:8080", 80).unwrap().as_str(), "[::1]:8080");
/// assert!(Host::parse(b"a.test/static", 80).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Host {
    text: String,
    name_len: usize,
}

impl Host {
    /// Validates and normalises `raw` (a Host field value or an authority), removing the port
    /// when it is `default_port`.
    pub fn parse(raw: &[u8], default_port: u16) -> Result<Host, AuthorityError> {
        if raw.contains(&b'@') {
            return Err(AuthorityError::UserInfo);
        }
        let (host, port) = split_port(raw)?;
        let mut text = String::with_capacity(raw.len());
        if host.first() == Some(&b'[') {
            let inner = host
                .strip_prefix(b"[")
                .and_then(|h| h.strip_suffix(b"]"))
                .ok_or(AuthorityError::BadIpLiteral)?;
            let addr: Ipv6Addr = std::str::from_utf8(inner)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(AuthorityError::BadIpLiteral)?;
            text.push('[');
            text.push_str(&addr.to_string());
            text.push(']');
        } else {
            let host = host.strip_suffix(b".").unwrap_or(host);
            if host.is_empty() {
                return Err(AuthorityError::Empty);
            }
            if host.last() == Some(&b'.') {
                return Err(AuthorityError::EmptyLabel);
            }
            if host.len() > MAX_HOST_LEN {
                return Err(AuthorityError::TooLong);
            }
            // One pass: each byte checked and lower-cased through one table lookup, and
            // pushed as the ASCII character it then is.
            for (i, &b) in host.iter().enumerate() {
                let lower = REG_NAME[usize::from(b)];
                if lower == 0 {
                    return Err(AuthorityError::BadByte(b));
                }
                if b == b'%' {
                    let hex = host.get(i + 1..i + 3).ok_or(AuthorityError::BadPercent)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return Err(AuthorityError::BadPercent);
                    }
                }
                text.push(char::from(lower));
            }
        }
        let name_len = text.len();
        if let Some(p) = port.filter(|p| *p != default_port) {
            text.push(':');
            super::outcome::push_decimal(&mut text, i64::from(p));
        }
        Ok(Host { text, name_len })
    }

    /// `host[:port]`, normalised: what the cache key, the route and the origin's `Host` use.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The host without its port.
    pub fn name(&self) -> &str {
        &self.text[..self.name_len]
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// For each byte, its lower-case form when a reg-name may hold it (RFC 3986 `unreserved`,
/// `sub-delims`, and the `%` of a percent-encoding, whose two hex digits the caller checks);
/// 0 when it may not.
const REG_NAME: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        if is_reg_name_byte(byte) || byte == b'%' {
            table[b] = byte.to_ascii_lowercase();
        }
        b += 1;
    }
    table
};

/// RFC 3986 `unreserved / sub-delims` (a `%` is checked by the caller).
const fn is_reg_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
        )
}

/// Splits `host[:port]`; an empty port is no port (RFC 3986 §6.2.3).
fn split_port(raw: &[u8]) -> Result<(&[u8], Option<u16>), AuthorityError> {
    let (host, port) = if raw.first() == Some(&b'[') {
        // An IP literal: the port can only follow its closing bracket.
        let close = raw
            .iter()
            .position(|&b| b == b']')
            .ok_or(AuthorityError::BadIpLiteral)?;
        match &raw[close + 1..] {
            [] => return Ok((raw, None)),
            [b':', port @ ..] => (&raw[..=close], port),
            _ => return Err(AuthorityError::BadIpLiteral),
        }
    } else {
        match raw.iter().position(|&b| b == b':') {
            None => return Ok((raw, None)),
            Some(colon) => (&raw[..colon], &raw[colon + 1..]),
        }
    };
    if host.is_empty() {
        return Err(AuthorityError::Empty);
    }
    if port.is_empty() {
        return Ok((host, None));
    }
    if port.len() > 5 || !port.iter().all(u8::is_ascii_digit) {
        return Err(AuthorityError::BadPort);
    }
    let n: u32 = port.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0'));
    let n = u16::try_from(n).map_err(|_| AuthorityError::BadPort)?;
    Ok((host, Some(n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> String {
        Host::parse(raw.as_bytes(), 80)
            .unwrap_or_else(|e| panic!("{raw:?}: {e}"))
            .as_str()
            .to_string()
    }

    fn err(raw: &[u8]) -> AuthorityError {
        Host::parse(raw, 80).unwrap_err()
    }

    #[test]
    fn normalises_case_trailing_dot_and_default_port() {
        assert_eq!(ok("A.Test"), "a.test");
        assert_eq!(ok("a.test."), "a.test");
        assert_eq!(ok("a.test:80"), "a.test");
        assert_eq!(ok("a.test.:80"), "a.test");
        assert_eq!(ok("a.test:"), "a.test");
        assert_eq!(ok("a.test:0080"), "a.test");
        assert_eq!(ok("a.test:8080"), "a.test:8080");
        assert_eq!(ok("a.test:08080"), "a.test:8080");
        assert_eq!(ok("127.0.0.1:80"), "127.0.0.1");
        assert_eq!(ok("[0:0:0:0:0:0:0:1]"), "[::1]");
        assert_eq!(ok("[::1]:8080"), "[::1]:8080");
        assert_eq!(ok("[::FFFF:1.2.3.4]"), "[::ffff:1.2.3.4]");
        assert_eq!(ok("xn--bcher-kva.test"), "xn--bcher-kva.test");
        assert_eq!(ok("a_b~c.test"), "a_b~c.test");
        assert_eq!(ok("%41.test"), "%41.test");
        let h = Host::parse(b"A.test:8080", 80).unwrap();
        assert_eq!(h.name(), "a.test");
        assert_eq!(Host::parse(b"a.test:443", 443).unwrap().as_str(), "a.test");
        assert_eq!(
            Host::parse(b"a.test:80", 443).unwrap().as_str(),
            "a.test:80"
        );
    }

    #[test]
    fn refuses_anything_but_a_host_and_a_port() {
        assert_eq!(err(b"a.test/static"), AuthorityError::BadByte(b'/'));
        assert_eq!(err(b"a.test?x"), AuthorityError::BadByte(b'?'));
        assert_eq!(err(b"a.test#x"), AuthorityError::BadByte(b'#'));
        assert_eq!(err(b"a.test\\x"), AuthorityError::BadByte(b'\\'));
        assert_eq!(err(b"a test"), AuthorityError::BadByte(b' '));
        assert_eq!(err(b"a.test\xff"), AuthorityError::BadByte(0xff));
        assert_eq!(err(b"a.test\x00"), AuthorityError::BadByte(0));
        assert_eq!(err(b"user@a.test"), AuthorityError::UserInfo);
        assert_eq!(err(b""), AuthorityError::Empty);
        assert_eq!(err(b"."), AuthorityError::Empty);
        assert_eq!(err(b":80"), AuthorityError::Empty);
        assert_eq!(err(b"a.test.."), AuthorityError::EmptyLabel);
        assert_eq!(err(b"a.test:65536"), AuthorityError::BadPort);
        assert_eq!(err(b"a.test:8o"), AuthorityError::BadPort);
        assert_eq!(err(b"a.test:1:2"), AuthorityError::BadPort);
        assert_eq!(err(b"a.test:123456"), AuthorityError::BadPort);
        assert_eq!(err(b"[::1"), AuthorityError::BadIpLiteral);
        assert_eq!(err(b"[v1.x]"), AuthorityError::BadIpLiteral);
        assert_eq!(err(b"[1.2.3.4]"), AuthorityError::BadIpLiteral);
        assert_eq!(err(b"[::1]x"), AuthorityError::BadIpLiteral);
        assert_eq!(err(b"[::1]:x"), AuthorityError::BadPort);
        assert_eq!(err(b"%4"), AuthorityError::BadPercent);
        assert_eq!(err(b"%zz.test"), AuthorityError::BadPercent);
        assert_eq!(err(&[b'a'; 300]), AuthorityError::TooLong);
    }

    /// The reg-name check as it read before the table: a byte at a time through
    /// `is_reg_name_byte`, then the whole host lower-cased.
    fn reference_reg_name(host: &[u8]) -> Result<String, AuthorityError> {
        for (i, &b) in host.iter().enumerate() {
            if b == b'%' {
                let hex = host.get(i + 1..i + 3).ok_or(AuthorityError::BadPercent)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return Err(AuthorityError::BadPercent);
                }
            } else if !is_reg_name_byte(b) {
                return Err(AuthorityError::BadByte(b));
            }
        }
        Ok(String::from_utf8_lossy(host).to_ascii_lowercase())
    }

    #[test]
    fn the_table_is_the_byte_class() {
        for b in 0..=255u8 {
            let want = if is_reg_name_byte(b) || b == b'%' {
                b.to_ascii_lowercase()
            } else {
                0
            };
            assert_eq!(REG_NAME[usize::from(b)], want, "byte 0x{b:02x}");
        }
    }

    /// Every byte, at every place of a few hosts (and a `%` before it, and doubled), reads as
    /// the byte-at-a-time check reads it: the same host or the same error.
    #[test]
    fn every_byte_anywhere_reads_as_the_reference_reads_it() {
        let bases: [&[u8]; 4] = [b"a", b"Ab.Test", b"%4a.x-Y_z~1", b"img.cdn-EXAMPLE.net"];
        let mut checked = 0;
        for base in bases {
            for at in 0..=base.len() {
                for b in 0..=255u8 {
                    for insert in [vec![b], vec![b'%', b], vec![b, b]] {
                        let mut host = base[..at].to_vec();
                        host.extend(&insert);
                        host.extend(&base[at..]);
                        // Only the reg-name pass is compared: no port, no brackets, no `@`,
                        // no trailing dot, which other checks read first.
                        if host.iter().any(|&c| matches!(c, b':' | b'[' | b'@'))
                            || host.last() == Some(&b'.')
                        {
                            continue;
                        }
                        let got = Host::parse(&host, 80).map(|h| h.as_str().to_string());
                        assert_eq!(got, reference_reg_name(&host), "{host:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 20_000, "{checked}");
    }

    #[test]
    fn spellings_of_one_host_give_one_value() {
        let spellings = [
            "Img.Test",
            "img.test.",
            "img.test:80",
            "IMG.TEST.:",
            "img.test:00080",
        ];
        for s in spellings {
            assert_eq!(ok(s), "img.test", "{s}");
        }
    }
}
