//! Phase 1, `check`: a request either becomes a [`Target`] (the normalised host, the configured
//! origin that serves it, the cache key) or a [`Refusal`], before anything else happens.
//!
//! Also here: [`forwardable`], which makes a request's headers what the origin may receive (on
//! GET/HEAD only the allow-listed fields), applied to every request sent to an origin.

use super::authority::Host;
use super::outcome::Refusal;
use crate::http_cache::{self, cache_key};
use crate::origin::GroupId;
use crate::origin::Origins;
use http::header::{self, HeaderMap, HeaderName};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Method, Version};

/// Where a checked request goes.
#[derive(Clone, Debug)]
pub struct Target {
    /// The request's host, normalised: the key's, the route's and the origin's `Host`.
    pub host: Host,
    /// The configured group of origin servers that serves it.
    pub origin: GroupId,
    /// The scheme the client used (`http` or `https`): part of the key.
    pub scheme: &'static str,
    /// The port its Host may leave out (80 or 443).
    pub default_port: u16,
    /// The path and query, as received.
    pub path_and_query: PathAndQuery,
    /// The primary cache key (`GET http://host/path?query`).
    pub key: String,
    /// The key's 64-bit object id ([`object_id`](crate::hash::object_id)): what the admission
    /// policy is keyed on (as [`KeyHash::of_u64`](crate::KeyHash::of_u64)) and what a recording
    /// writes, so a simulator replaying the recording decides on the very same hashes.
    pub id: u64,
}

/// What `check` needs to know about the listener and the limits.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// The listener's scheme (`http`, or `https` on the TLS listener); keys carry it.
    pub scheme: &'static str,
    /// The port a Host may leave out (80 for `http`, 443 for `https`).
    pub default_port: u16,
    /// Longest request target accepted.
    pub max_uri: usize,
}

/// Checks a request: method, body on GET/HEAD, target length, the host (RFC 9110 §4.2, RFC 9112
/// §3.2, RFC 9113 §8.3.1) and the route. `body_empty`: the request carries no body (the body's
/// end was already known when the head was read).
pub fn check(
    parts: &Parts,
    body_empty: bool,
    rules: &Rules,
    origins: &Origins,
) -> Result<Target, Refusal> {
    if parts.method == Method::CONNECT {
        return Err(Refusal::Connect);
    }
    // A GET or HEAD with a body: the body is not part of the key, so it must not reach the
    // origin (a response to it would be cached for everyone); with Transfer-Encoding it is also a
    // desynchronisation attempt.
    let get_like = parts.method == Method::GET || parts.method == Method::HEAD;
    if get_like && (!body_empty || parts.headers.contains_key(header::TRANSFER_ENCODING)) {
        return Err(Refusal::BodyOnGetOrHead);
    }
    let path_and_query = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    if path_and_query.as_str().len() > rules.max_uri {
        return Err(Refusal::UriTooLong);
    }
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let host_field = hosts.next();
    if hosts.next().is_some() {
        return Err(Refusal::DuplicateHost);
    }
    let parse = |raw: &[u8]| Host::parse(raw, rules.default_port).map_err(Refusal::BadHost);
    // HTTP/2 carries the authority in `:authority` (hyper puts it in the URI); HTTP/1 only in an
    // absolute-form target, which makes this a proxy-style request for some site.
    let absolute = parts.version < Version::HTTP_2 && parts.uri.authority().is_some();
    let host = match (parts.uri.authority(), host_field) {
        (Some(authority), field) => {
            if absolute && parts.uri.scheme_str() != Some(rules.scheme) {
                return Err(Refusal::Scheme);
            }
            let host = parse(authority.as_str().as_bytes())?;
            // RFC 9112 §3.2.2: with an absolute-form target the received Host is ignored (it is
            // replaced by the target's). RFC 9113 §8.3.1: a Host that names another entity than
            // `:authority` makes the request malformed.
            if let (false, Some(field)) = (absolute, field) {
                if parse(field.as_bytes())? != host {
                    return Err(Refusal::HostConflict);
                }
            }
            host
        }
        (None, Some(field)) if !field.is_empty() => parse(field.as_bytes())?,
        (None, _) => return Err(Refusal::NoHost),
    };
    let origin = origins.route(&host, absolute).ok_or(Refusal::UnknownHost)?;
    let key = cache_key(rules.scheme, host.as_str(), path_and_query.as_str());
    Ok(Target {
        host,
        origin,
        scheme: rules.scheme,
        default_port: rules.default_port,
        path_and_query,
        id: crate::hash::object_id(key.as_bytes()),
        key,
    })
}

/// Makes `headers` what the origin may receive. Hop-by-hop fields were removed when the request
/// came in (before the lookup, so that a Vary variant is never keyed on a field the origin does
/// not get from that request); here, on GET and HEAD (the requests whose responses may be stored)
/// only the fields in `forwarded` are kept (and `Host`, which the caller sets to the normalised
/// host), so no input outside the cache key can shape a stored response; on other methods
/// (never stored) the header-override fields some origins honour
/// ([`http_cache::strip_unkeyed_overrides`]) are removed. A field dropped here is dropped for every
/// client alike, so a variant keyed on its value (as RFC 9111 §4.1 asks) is only finer, never
/// wrong. `*` in `forwarded` forwards every field but the override fields (the open setting, for
/// origins that trust their clients' fields, and for test suites that tag requests with their own).
pub fn forwardable(method: &Method, headers: &mut HeaderMap, forwarded: &[HeaderName]) {
    let rule = Forwarding::new(method, forwarded);
    let dropped: Vec<HeaderName> = headers
        .keys()
        .filter(|name| !rule.keeps(name))
        .cloned()
        .collect();
    for name in dropped {
        headers.remove(name);
    }
}

/// [`forwardable`]'s rule for one request, field by field: what a writer of the origin's request
/// head applies without changing the client's headers.
#[derive(Clone, Copy, Debug)]
pub struct Forwarding<'a> {
    /// Only `Host` and the `forwarded` fields (GET and HEAD without `*`); else all but the
    /// override fields.
    listed_only: bool,
    forwarded: &'a [HeaderName],
}

impl<'a> Forwarding<'a> {
    /// The rule for a request with `method`, given the `forwarded` allow-list.
    pub fn new(method: &Method, forwarded: &'a [HeaderName]) -> Forwarding<'a> {
        let all = forwarded.iter().any(|n| n.as_str() == "*");
        Forwarding {
            listed_only: !all && (method == Method::GET || method == Method::HEAD),
            forwarded,
        }
    }

    /// Whether a field named `name` reaches the origin.
    pub fn keeps(&self, name: &HeaderName) -> bool {
        if self.listed_only {
            // Host stays: the caller sets it to the normalised host.
            name == header::HOST || self.forwarded.contains(name)
        } else {
            !http_cache::is_unkeyed_override(name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use http::Request;

    fn origins() -> Origins {
        let c = Config::from_toml(
            "origin = \"http://127.0.0.1:1000\"\n[hosts]\n\"img.test\" = \"http://127.0.0.1:2000\"",
        )
        .unwrap();
        Origins::new(&c, None).unwrap()
    }

    const RULES: Rules = Rules {
        scheme: "http",
        default_port: 80,
        max_uri: 100,
    };

    fn parts(b: http::request::Builder) -> Parts {
        b.body(()).unwrap().into_parts().0
    }

    /// The first server of the group a target goes to.
    fn authority(t: &Target) -> String {
        origins().group(t.origin).servers[0]
            .url
            .authority
            .to_string()
    }

    fn run(b: http::request::Builder) -> Result<Target, Refusal> {
        check(&parts(b), true, &RULES, &origins())
    }

    #[test]
    fn a_host_with_a_slash_is_refused_not_keyed_as_a_path() {
        let r = run(Request::get("/x1").header("host", "a.test/static"));
        assert_eq!(r.unwrap_err().as_str(), "host-bad-byte");
        let r = run(Request::get("/x1").header("host", "img.test/static"));
        assert!(r.is_err(), "never routed to the default origin");
        let t = run(Request::get("/static/x1").header("host", "A.test.:80")).unwrap();
        assert_eq!(t.key, "GET http://a.test/static/x1");
    }

    #[test]
    fn the_key_the_route_and_the_host_are_one_value() {
        let t = run(Request::get("/a").header("host", "IMG.test.")).unwrap();
        assert_eq!(
            (t.host.as_str(), authority(&t), t.key.as_str()),
            (
                "img.test",
                "127.0.0.1:2000".to_string(),
                "GET http://img.test/a"
            )
        );
        // Absolute form: the target's authority wins, the Host field is ignored.
        let t = run(Request::get("http://img.test/a").header("host", "evil.test")).unwrap();
        assert_eq!(
            (t.host.as_str(), authority(&t)),
            ("img.test", "127.0.0.1:2000".to_string())
        );
        // Absolute form for a site without a [hosts] entry: refused, never the default origin.
        let r = run(Request::get("http://evil.test/a").header("host", "img.test"));
        assert_eq!(r.unwrap_err(), Refusal::UnknownHost);
        let r = run(Request::get("https://img.test/a").header("host", "img.test"));
        assert_eq!(r.unwrap_err(), Refusal::Scheme);
    }

    #[test]
    fn http2_authority_and_host_must_agree() {
        let h2 = |host: Option<&str>| {
            let mut b = Request::get("http://img.test/a").version(Version::HTTP_2);
            if let Some(h) = host {
                b = b.header("host", h);
            }
            run(b)
        };
        assert_eq!(h2(None).unwrap().host.as_str(), "img.test");
        assert_eq!(h2(Some("IMG.test:80")).unwrap().host.as_str(), "img.test");
        assert_eq!(h2(Some("evil.test")).unwrap_err(), Refusal::HostConflict);
        // HTTP/2 with only a host field (no :authority).
        let t = run(Request::get("/a")
            .version(Version::HTTP_2)
            .header("host", "img.test"));
        assert_eq!(authority(&t.unwrap()), "127.0.0.1:2000");
    }

    #[test]
    fn refusals() {
        let two_hosts = Request::get("/a")
            .header("host", "a.test")
            .header("host", "b.test");
        assert_eq!(run(two_hosts).unwrap_err(), Refusal::DuplicateHost);
        assert_eq!(run(Request::get("/a")).unwrap_err(), Refusal::NoHost);
        assert_eq!(
            run(Request::get("/a").header("host", "")).unwrap_err(),
            Refusal::NoHost
        );
        let long = format!("/{}", "a".repeat(200));
        assert_eq!(
            run(Request::get(long.as_str()).header("host", "a.test")).unwrap_err(),
            Refusal::UriTooLong
        );
        let connect = Request::builder()
            .method(Method::CONNECT)
            .uri("a.test:443")
            .header("host", "a.test:443");
        assert_eq!(run(connect).unwrap_err(), Refusal::Connect);
        let with_body = parts(Request::get("/a").header("host", "a.test"));
        assert_eq!(
            check(&with_body, false, &RULES, &origins()).unwrap_err(),
            Refusal::BodyOnGetOrHead
        );
        let post = parts(Request::post("/a").header("host", "a.test"));
        assert!(check(&post, false, &RULES, &origins()).is_ok());
    }

    #[test]
    fn only_the_allow_list_is_forwarded_on_get() {
        let allow = [header::ACCEPT_LANGUAGE, header::USER_AGENT];
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("accept-language", "en"),
            ("user-agent", "t"),
            ("x-forwarded-port", "1337"),
            ("x_forwarded_host", "evil"),
            ("x-host", "evil"),
            ("connection", "user-agent"),
        ] {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        // user-agent is named in Connection: hop-by-hop, gone as the request comes in.
        http_cache::strip_hop_by_hop(&mut h);
        let mut get = h.clone();
        forwardable(&Method::GET, &mut get, &allow);
        assert_eq!(get.len(), 1, "{get:?}");
        assert_eq!(get["accept-language"], "en");
        let mut post = h.clone();
        forwardable(&Method::POST, &mut post, &allow);
        assert!(post.contains_key("accept-language") && !post.contains_key("user-agent"));
        assert!(!post.contains_key("x_forwarded_host") && !post.contains_key("x-host"));
        // "*": everything but the override fields, on every method.
        let mut open = h.clone();
        let mut get = h;
        forwardable(&Method::GET, &mut open, &[HeaderName::from_static("*")]);
        forwardable(&Method::POST, &mut get, &[HeaderName::from_static("*")]);
        assert_eq!(open, get);
        assert!(open.contains_key("accept-language") && !open.contains_key("x-forwarded-port"));
    }
}
