//! Cache keys: which requests share a stored object, and the hash the admission policy sees.
//!
//! The key's primary part is the request's host and its path with query, each length-prefixed
//! so that no two different pairs frame to the same bytes (Pingora hashes only the primary part
//! and leaves the framing to the caller). GET and HEAD of one URL share a key: Pingora turns a
//! HEAD miss into a GET upstream and serves HEAD from the stored GET response.

use pingora_cache::key::CacheHashKey;
use pingora_cache::CacheKey;
use pingora_http::RequestHeader;
use secondhit_admission::KeyHash;

/// The cache key of a request: host (ASCII-lowercased) and path with query.
///
/// The host is the request URI's authority when it has one (HTTP/2's `:authority`), else the
/// `Host` header, else empty. Pingora 0.9 keeps only the path in the URI of an HTTP/1.1
/// absolute-form request (`GET http://host/path`) and rejects one whose `Host` does not match
/// its authority, so such a request is keyed by its `Host` like an origin-form one.
///
/// # Example
/// ```
/// use pingora_http::RequestHeader;
/// use secondhit_pingora::cache_key;
///
/// let mut a = RequestHeader::build("GET", b"/img/1.jpg?w=200", None)?;
/// a.insert_header("Host", "CDN.example")?;
/// let mut b = RequestHeader::build("HEAD", b"/img/1.jpg?w=200", None)?;
/// b.insert_header("host", "cdn.example")?;
/// assert_eq!(cache_key(&a).primary_key(), cache_key(&b).primary_key());
/// # Ok::<(), Box<pingora_core::Error>>(())
/// ```
pub fn cache_key(req: &RequestHeader) -> CacheKey {
    let host = match req.uri.authority() {
        Some(authority) => authority.as_str().as_bytes(),
        None => req
            .headers
            .get("host")
            .map(|value| value.as_bytes())
            .unwrap_or_default(),
    };
    let path = req
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .as_bytes();

    let mut primary = Vec::with_capacity(8 + host.len() + path.len());
    push_framed(&mut primary, host, true);
    push_framed(&mut primary, path, false);
    CacheKey::new(primary, "")
}

/// Appends `part` with its length as a 4-byte little-endian prefix.
fn push_framed(out: &mut Vec<u8>, part: &[u8], lowercase: bool) {
    // A request header cannot come near 4 GiB; saturate rather than wrap if one ever did.
    let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    let start = out.len();
    out.extend_from_slice(part);
    if lowercase {
        out[start..].make_ascii_lowercase();
    }
}

/// The admission policy's view of a key: Pingora's own 128-bit hash of the primary key
/// (Blake2b-128, the hash its storage indexes by), passed through
/// [`KeyHash::from_raw`]. Using the storage's hash means the policy and the cache always agree
/// on which requests are "the same object", and no second hash is computed per miss.
///
/// # Example
/// ```
/// use pingora_cache::CacheKey;
/// use secondhit_pingora::key_hash;
///
/// let a = key_hash(&CacheKey::new("cdn.example/a", ""));
/// assert_eq!(a, key_hash(&CacheKey::new("cdn.example/a", "")));
/// assert_ne!(a, key_hash(&CacheKey::new("cdn.example/b", "")));
/// ```
pub fn key_hash(key: &CacheKey) -> KeyHash {
    KeyHash::from_raw(u128::from_le_bytes(key.primary_bin()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, target: &[u8], host: Option<&str>) -> RequestHeader {
        let mut req = RequestHeader::build(method, target, None).unwrap();
        if let Some(host) = host {
            req.insert_header("host", host).unwrap();
        }
        req
    }

    #[test]
    fn framing_keeps_host_and_path_apart() {
        let a = cache_key(&request("GET", b"/bc", Some("a")));
        let b = cache_key(&request("GET", b"c", Some("ab")));
        assert_ne!(a.primary_key(), b.primary_key());
    }

    #[test]
    fn absolute_form_is_keyed_like_origin_form() {
        let a = cache_key(&request(
            "GET",
            b"http://cdn.example/x?q=1",
            Some("cdn.example"),
        ));
        let b = cache_key(&request("GET", b"/x?q=1", Some("CDN.example")));
        assert_eq!(a.primary_key(), b.primary_key());
    }

    #[test]
    fn query_and_host_are_part_of_the_key() {
        let base = cache_key(&request("GET", b"/x", Some("h")));
        assert_ne!(
            base.primary_key(),
            cache_key(&request("GET", b"/x?v=2", Some("h"))).primary_key()
        );
        assert_ne!(
            base.primary_key(),
            cache_key(&request("GET", b"/x", Some("g"))).primary_key()
        );
        assert_ne!(
            base.primary_key(),
            cache_key(&request("GET", b"/x", None)).primary_key()
        );
    }
}
