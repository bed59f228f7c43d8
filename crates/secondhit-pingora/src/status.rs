//! The `x-cache` response header: what the cache did for this response.

use pingora_cache::{CachePhase, NoCacheReason};
use secondhit_admission::admission::Decision;

/// The response header [`SecondHitProxy`](crate::SecondHitProxy) adds to every response it
/// proxies or serves from its cache. It is added in `response_filter`, after the response was
/// handed to storage, so it is never stored with the object.
pub const CACHE_STATUS_HEADER: &str = "x-cache";

/// What the cache did for one response: the value of [`CACHE_STATUS_HEADER`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheStatus {
    /// Served from the cache (fresh, or stale and revalidated with the origin).
    Hit,
    /// Fetched from the origin and stored (the admission policy admitted it, or it replaces an
    /// expired copy of an object that was admitted before).
    Miss,
    /// Fetched from the origin, cacheable, but not stored: the admission policy had not seen the
    /// key before.
    Deferred,
    /// The cache did not take part: a method other than GET/HEAD, or a response its origin marked
    /// not cacheable (`no-store`, `private`, no freshness information, `Vary`, ...).
    Bypass,
}

impl CacheStatus {
    /// The status of a response, from Pingora's cache phase when the response headers are sent
    /// downstream and the admission decision taken for the request, if one was.
    ///
    /// `Disabled(Deferred)` counts as [`CacheStatus::Deferred`] only when the policy deferred:
    /// Pingora also uses that reason for its own bypass logic.
    ///
    /// # Example
    /// ```
    /// use pingora_cache::{CachePhase, NoCacheReason};
    /// use secondhit_admission::admission::Decision;
    /// use secondhit_pingora::CacheStatus;
    ///
    /// let deferred = CachePhase::Disabled(NoCacheReason::Deferred);
    /// assert_eq!(CacheStatus::of(deferred, Some(Decision::Defer)), CacheStatus::Deferred);
    /// assert_eq!(CacheStatus::of(CachePhase::Miss, Some(Decision::Admit)), CacheStatus::Miss);
    /// assert_eq!(CacheStatus::of(CachePhase::Hit, None).as_str(), "HIT");
    /// ```
    pub fn of(phase: CachePhase, decision: Option<Decision>) -> Self {
        match phase {
            CachePhase::Hit
            | CachePhase::Stale
            | CachePhase::StaleUpdating
            | CachePhase::Revalidated
            | CachePhase::RevalidatedNoCache(_) => CacheStatus::Hit,
            CachePhase::Miss | CachePhase::Expired => CacheStatus::Miss,
            CachePhase::Disabled(NoCacheReason::Deferred) if decision == Some(Decision::Defer) => {
                CacheStatus::Deferred
            }
            _ => CacheStatus::Bypass,
        }
    }

    /// `"HIT"`, `"MISS"`, `"DEFERRED"` or `"BYPASS"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "HIT",
            CacheStatus::Miss => "MISS",
            CacheStatus::Deferred => "DEFERRED",
            CacheStatus::Bypass => "BYPASS",
        }
    }
}

impl std::fmt::Display for CacheStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingora_deferral_without_a_policy_decision_is_a_bypass() {
        let phase = CachePhase::Disabled(NoCacheReason::Deferred);
        assert_eq!(CacheStatus::of(phase, None), CacheStatus::Bypass);
        assert_eq!(
            CacheStatus::of(phase, Some(Decision::Admit)),
            CacheStatus::Bypass
        );
    }

    #[test]
    fn uncacheable_and_never_enabled_are_bypasses() {
        for reason in [NoCacheReason::NeverEnabled, NoCacheReason::OriginNotCache] {
            assert_eq!(
                CacheStatus::of(CachePhase::Disabled(reason), None),
                CacheStatus::Bypass
            );
        }
    }
}
