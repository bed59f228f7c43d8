//! Phase 6, `classify`: what a fetched response means for the cache, as a pure function of what
//! the request was allowed (its [`Intent`]), the response head, the rules and `now`: the
//! [`Outcome`], the `Cache-Status`, and whether (and how fresh) to store it.

use super::outcome::{CacheStatus, Fwd, Outcome};
use crate::http_cache::{storability, Credentials, Freshness, NoStore, StoreRules};
use http::{HeaderMap, StatusCode};
use std::time::SystemTime;

/// What a forwarded request was allowed, decided before the origin answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    /// Never stored, whatever the response (the request was not cacheable, or was a HEAD or a
    /// Range miss).
    Bypass(NoStore),
    /// Cacheable, but the admission policy said not yet.
    Deferred,
    /// Admitted: stored if the response allows.
    Admitted,
}

/// What to do with a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    /// `X-Cache`.
    pub outcome: Outcome,
    /// `Cache-Status`.
    pub status: CacheStatus,
    /// Store it once its body is complete, fresh for this long.
    pub store: Option<Freshness>,
    /// Its freshness wherever it could be stored, admitted or deferred (what the lab's
    /// recording says of it).
    pub fresh: Option<Freshness>,
}

/// The response facts `classify` needs.
#[derive(Clone, Copy, Debug)]
pub struct ResponseHead<'a> {
    /// Its status.
    pub status: StatusCode,
    /// Its headers (hop-by-hop removed).
    pub headers: &'a HeaderMap,
    /// Its announced body length, if any.
    pub length: Option<u64>,
    /// Its body runs to the close of the origin's connection (no length, not chunked): never
    /// shown complete, so never stored.
    pub close_delimited: bool,
}

/// Classifies a response. `credentials`: what the request sent to the origin carried. `max_object`: the
/// largest body stored. `now`: when the response arrived, on the wall clock (for `Date`).
pub fn classify(
    intent: Intent,
    response: ResponseHead<'_>,
    credentials: Credentials,
    rules: &StoreRules,
    max_object: u64,
    now: SystemTime,
) -> Classified {
    let storable = || -> Result<Freshness, NoStore> {
        let f = storability(response.status, response.headers, credentials, rules, now)?;
        if response.length.is_some_and(|n| n > max_object) {
            return Err(NoStore::TooLarge);
        }
        if response.close_delimited {
            return Err(NoStore::CloseDelimited);
        }
        Ok(f)
    };
    let not_stored = |fwd: Fwd, reason: NoStore| Classified {
        outcome: Outcome::Bypass,
        status: CacheStatus::forwarded(fwd, Some(reason.as_str())),
        store: None,
        fresh: None,
    };
    match intent {
        Intent::Bypass(reason) => not_stored(Fwd::Bypass, reason),
        Intent::Deferred => match storable() {
            Ok(freshness) => Classified {
                outcome: Outcome::Deferred,
                status: CacheStatus::forwarded(Fwd::UriMiss, Some("deferred")),
                store: None,
                fresh: Some(freshness),
            },
            Err(reason) => not_stored(Fwd::UriMiss, reason),
        },
        Intent::Admitted => match storable() {
            Ok(freshness) => Classified {
                outcome: Outcome::Miss,
                status: CacheStatus {
                    stored: true,
                    ..CacheStatus::forwarded(Fwd::UriMiss, None)
                },
                store: Some(freshness),
                fresh: Some(freshness),
            },
            Err(reason) => not_stored(Fwd::UriMiss, reason),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{self, HeaderValue};
    use std::time::Duration;

    fn head(status: u16, cc: &str, length: Option<u64>) -> (StatusCode, HeaderMap, Option<u64>) {
        let mut h = HeaderMap::new();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_str(cc).unwrap());
        (StatusCode::from_u16(status).unwrap(), h, length)
    }

    fn run(intent: Intent, r: &(StatusCode, HeaderMap, Option<u64>)) -> Classified {
        run_framed(intent, r, false)
    }

    fn run_framed(
        intent: Intent,
        r: &(StatusCode, HeaderMap, Option<u64>),
        close_delimited: bool,
    ) -> Classified {
        let response = ResponseHead {
            status: r.0,
            headers: &r.1,
            length: r.2,
            close_delimited,
        };
        classify(
            intent,
            response,
            Credentials::NONE,
            &StoreRules::default(),
            1000,
            SystemTime::UNIX_EPOCH,
        )
    }

    #[test]
    fn admitted_and_storable_is_a_stored_miss() {
        let c = run(Intent::Admitted, &head(200, "max-age=60", Some(10)));
        assert_eq!(c.outcome, Outcome::Miss);
        assert_eq!(c.status.render(), "secondhit; fwd=uri-miss; stored");
        assert_eq!(c.store.unwrap().lifetime, Duration::from_secs(60));
    }

    #[test]
    fn deferred_only_when_it_could_have_been_stored() {
        let c = run(Intent::Deferred, &head(200, "max-age=60", None));
        assert_eq!((c.outcome, c.store), (Outcome::Deferred, None));
        assert_eq!(
            c.status.render(),
            "secondhit; fwd=uri-miss; detail=deferred"
        );
        let c = run(Intent::Deferred, &head(200, "no-store", None));
        assert_eq!(c.outcome, Outcome::Bypass);
        assert_eq!(
            c.status.render(),
            "secondhit; fwd=uri-miss; detail=no-store"
        );
    }

    #[test]
    fn a_body_to_the_close_is_never_stored() {
        let response = head(200, "max-age=60", None);
        for intent in [Intent::Admitted, Intent::Deferred] {
            let c = run_framed(intent, &response, true);
            assert_eq!((c.outcome, c.store), (Outcome::Bypass, None));
            assert_eq!(
                c.status.render(),
                "secondhit; fwd=uri-miss; detail=close-delimited"
            );
        }
    }

    #[test]
    fn too_large_and_bypassed_are_never_stored() {
        let c = run(Intent::Admitted, &head(200, "max-age=60", Some(1001)));
        assert_eq!((c.outcome, c.store), (Outcome::Bypass, None));
        assert_eq!(c.status.detail, Some("too-large"));
        let c = run(
            Intent::Bypass(NoStore::Method),
            &head(200, "max-age=60", Some(1)),
        );
        assert_eq!(c.status.render(), "secondhit; fwd=bypass; detail=method");
        assert_eq!(c.store, None);
    }
}
