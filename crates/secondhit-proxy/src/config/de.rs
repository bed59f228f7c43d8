//! Serde helpers for [`Config`](super::Config)'s fields: each turns a TOML string or number
//! into its type (a size, a duration, a policy, an origin URL) or refuses it with a message that
//! names the value, so that a wrong value fails while parsing, on its line.

use super::OriginRef;
use crate::lab::ShadowSpec;
use crate::proxy::authority::Host;
use crate::store::Eviction;
use crate::units;
use http::HeaderName;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Deserialises a string with the type's `FromStr`.
pub(super) fn de_parse<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

pub(super) fn de_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(u64),
        S(String),
    }
    match Raw::deserialize(d)? {
        Raw::N(n) => Ok(n),
        Raw::S(s) => units::parse_bytes(&s).map_err(serde::de::Error::custom),
    }
}

pub(super) fn de_nonzero_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match de_bytes(d)? {
        0 => Err(serde::de::Error::custom("must be more than 0 bytes")),
        n => Ok(n),
    }
}

pub(super) fn de_opt_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_nonzero_bytes(d).map(Some)
}

/// A buffer size that HTTP/1 parsing can work with (at least 8 KiB).
pub(super) fn de_buffer<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = de_bytes(d)?;
    if n < 8192 {
        return Err(serde::de::Error::custom(format!(
            "{n} is below the 8192 bytes HTTP/1 parsing needs"
        )));
    }
    usize::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} bytes is too large")))
}

/// A per-response budget: between 1 byte and 4 GiB.
pub(super) fn de_budget<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = de_nonzero_bytes(d)?;
    u32::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} is more than 4 GiB")))
}

pub(super) fn de_usize_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = de_bytes(d)?;
    usize::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} bytes is too large")))
}

pub(super) fn de_at_least_one<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(serde::de::Error::custom("must be at least 1")),
        n => Ok(n),
    }
}

pub(super) fn de_h2_streams<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        0 => Err(serde::de::Error::custom(
            "must be at least 1 (0 would refuse every HTTP/2 request)",
        )),
        n => Ok(n),
    }
}

pub(super) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    units::parse_duration(&s)
        .map_err(serde::de::Error::custom)?
        .ok_or_else(|| serde::de::Error::custom(format!("{s:?}: this timeout must be finite")))
}

pub(super) fn de_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    units::parse_duration(&s).map_err(serde::de::Error::custom)
}

pub(super) fn de_ttl<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim() == "none" {
        return Ok(None);
    }
    match units::parse_duration(&s).map_err(serde::de::Error::custom)? {
        Some(d) if d.is_zero() => Ok(None),
        other => Ok(other),
    }
}

pub(super) fn de_moka_eviction<'de, D: Deserializer<'de>>(d: D) -> Result<Eviction, D::Error> {
    parse_moka_eviction(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// An eviction the proxy's moka store has (`lru`, `tinylfu`); the simulator's others are named
/// as such.
pub fn parse_moka_eviction(s: &str) -> Result<Eviction, String> {
    let e: Eviction = s.parse()?;
    if e.is_moka() {
        Ok(e)
    } else {
        Err(format!(
            "eviction {e} exists only in the simulator's exact store (simulate --eviction {e}); \
             the proxy's moka store has lru and tinylfu"
        ))
    }
}

pub(super) fn de_opt_origin<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<OriginRef>, D::Error> {
    de_parse(d).map(Some)
}

pub(super) fn de_hosts<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, OriginRef>, D::Error> {
    let raw = BTreeMap::<String, String>::deserialize(d)?;
    let mut hosts = BTreeMap::new();
    for (host, url) in raw {
        let h = Host::parse(host.trim().as_bytes(), 80)
            .map_err(|e| serde::de::Error::custom(format!("{host:?} is not a host: {e}")))?;
        let url: OriginRef = url
            .parse()
            .map_err(|e| serde::de::Error::custom(format!("{host:?}: {e}")))?;
        if hosts.insert(h.as_str().to_string(), url).is_some() {
            return Err(serde::de::Error::custom(format!(
                "{host:?} is the same host as another entry ({})",
                h.as_str()
            )));
        }
    }
    Ok(hosts)
}

pub(super) fn de_statuses<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u16>, D::Error> {
    let statuses = Vec::<u16>::deserialize(d)?;
    if let Some(bad) = statuses.iter().find(|s| !(100..=599).contains(*s)) {
        return Err(serde::de::Error::custom(format!(
            "{bad} is not an HTTP status"
        )));
    }
    Ok(statuses)
}

pub(super) fn de_header_names<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<HeaderName>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|name| {
            HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                serde::de::Error::custom(format!("{name:?} is not a header field name"))
            })
        })
        .collect()
}

pub(super) fn de_shadows<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ShadowSpec>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| s.parse().map_err(serde::de::Error::custom))
        .collect()
}
