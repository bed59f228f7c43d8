//! [`Config::validate`]: the checks no single field can make, one function per section, run in
//! the order the sections are listed here. The first failure is the one reported.

use super::{
    invalid, AdmissionConfig, CacheConfig, Config, ConfigError, DiskConfig, LabConfig, Limits,
    OriginRef, Timeouts, TlsConfig, ValidConfig,
};
use crate::admission::Policy;

impl Config {
    /// Checks what no single field can: names the fields and the values.
    pub fn validate(self) -> Result<ValidConfig, ConfigError> {
        check_listeners(&self)?;
        check_origins(&self)?;
        if self.cache.disk.dir.is_some() {
            check_disk(&self.cache.disk)?;
        }
        check_cache(&self.cache)?;
        check_timeouts(&self.timeouts)?;
        check_limits(&self.limits, self.cache.max_object_size())?;
        check_tls(&self.tls)?;
        if self.state_snapshot_interval.is_zero() {
            return Err(invalid("state_snapshot_interval", "must be more than 0s"));
        }
        check_admission(&self.admission)?;
        check_lab(&self.lab, &self.admission)?;
        let token = admin_token(&self)?;
        Ok(ValidConfig(self, token))
    }
}

/// An origin to send to, an admin listener apart from the public one, and a bounded pool of
/// workers.
fn check_listeners(c: &Config) -> Result<(), ConfigError> {
    if c.origin.is_none() && c.hosts.is_empty() {
        return Err(invalid(
            "origin",
            "no origin configured: set origin = \"http://host:port\" (or --origin), or [hosts]",
        ));
    }
    if c.listen == c.admin_listen && c.listen.port() != 0 {
        return Err(invalid(
            "admin_listen",
            format!("{} is also the public listener", c.admin_listen),
        ));
    }
    if c.workers > Config::MAX_WORKERS {
        return Err(invalid(
            "workers",
            format!(
                "{} is more than {} threads (0 is one per core)",
                c.workers,
                Config::MAX_WORKERS
            ),
        ));
    }
    Ok(())
}

/// Every group sound, every group named where one is expected existing, and no group its own
/// fallback, directly or through others.
fn check_origins(c: &Config) -> Result<(), ConfigError> {
    for (name, g) in &c.origins {
        g.check(name).map_err(|m| invalid("origins", m))?;
    }
    let named = |field: &'static str, r: &OriginRef| match r {
        OriginRef::Group(g) if !c.origins.contains_key(g) => Err(invalid(
            field,
            format!("names the group {g:?}, which [origins] does not have"),
        )),
        _ => Ok(()),
    };
    if let Some(r) = &c.origin {
        named("origin", r)?;
    }
    for r in c.hosts.values() {
        named("hosts", r)?;
    }
    for (name, g) in &c.origins {
        let mut seen = vec![name.as_str()];
        let mut next = g.fallback.as_deref();
        while let Some(f) = next {
            let Some(behind) = c.origins.get(f) else {
                return Err(invalid(
                    "origins",
                    format!("origins.{name}.fallback names {f:?}, which [origins] does not have"),
                ));
            };
            if seen.contains(&f) {
                return Err(invalid(
                    "origins",
                    format!(
                        "origins.{name}.fallback: {} comes back to itself",
                        seen.join(" -> ")
                    ),
                ));
            }
            seen.push(f);
            next = behind.fallback.as_deref();
        }
    }
    Ok(())
}

/// `[cache.disk]`, when it has a directory: blocks the flash tier can write, room for two.
fn check_disk(d: &DiskConfig) -> Result<(), ConfigError> {
    if d.block_size < (1 << 20) || d.block_size % 4096 != 0 {
        return Err(invalid(
            "cache.disk.block_size",
            format!(
                "{} is not a multiple of 4 KiB of at least 1 MiB",
                d.block_size
            ),
        ));
    }
    if d.capacity < 2 * d.block_size {
        return Err(invalid(
            "cache.disk.capacity",
            format!(
                "{} is less than two blocks of {} bytes (set it with the directory: \
                 capacity = \"100GiB\")",
                d.capacity, d.block_size
            ),
        ));
    }
    if d.max_write_rate == Some(0) {
        return Err(invalid(
            "cache.disk.max_write_rate",
            "0 would refuse every write",
        ));
    }
    Ok(())
}

/// `[cache]`: the largest object fits in the cache and in an entry's weight.
fn check_cache(c: &CacheConfig) -> Result<(), ConfigError> {
    for (i, coding) in c.accept_encoding.iter().enumerate() {
        let token = !coding.is_empty()
            && coding
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.+!".contains(&b));
        if !token || coding == "identity" || c.accept_encoding[..i].contains(coding) {
            return Err(invalid(
                "cache.accept_encoding",
                format!(
                    "{coding:?}: list each content coding once, lower-case (e.g. [\"br\", \"zstd\", \"gzip\"]); identity is what is left"
                ),
            ));
        }
    }
    let max = c.max_object_size();
    if max > c.capacity {
        return Err(invalid(
            "cache.max_object_size",
            format!(
                "{max} is more than cache.capacity ({}): no object that large could be stored",
                c.capacity
            ),
        ));
    }
    if max > u64::from(u32::MAX) {
        return Err(invalid(
            "cache.max_object_size",
            format!("{max} is more than the 4 GiB an entry can weigh"),
        ));
    }
    check_slices(c)
}

/// The smallest slice: below it the per-slice request and entry cost more than the bytes.
pub const MIN_SLICE_SIZE: u64 = 64 << 10;

/// `cache.slice_size`: off, or a slice that a whole object may hold and the flash tier takes.
fn check_slices(c: &CacheConfig) -> Result<(), ConfigError> {
    let size = c.slice_size;
    if size == 0 {
        return Ok(());
    }
    let max = c.max_object_size();
    if size < MIN_SLICE_SIZE || size > max {
        return Err(invalid(
            "cache.slice_size",
            format!(
                "{size}: give 0 (off) or a size from {MIN_SLICE_SIZE} (64KiB) to cache.max_object_size ({max}), such as \"1MiB\""
            ),
        ));
    }
    if c.disk.dir.is_some() {
        let disk_max = (c.disk.block_size / 2).saturating_sub(64 << 10);
        if size > disk_max {
            return Err(invalid(
                "cache.slice_size",
                format!(
                    "{size} is more than the flash tier's largest object ({disk_max}: half of cache.disk.block_size less 64KiB): slices could never go to flash"
                ),
            ));
        }
    }
    Ok(())
}

/// `[timeouts]`: no client timeout of zero.
fn check_timeouts(t: &Timeouts) -> Result<(), ConfigError> {
    for (field, d) in [
        ("timeouts.client_header", t.client_header),
        ("timeouts.client_body", t.client_body),
        ("timeouts.client_send", t.client_send),
        ("timeouts.client_idle", t.client_idle),
    ] {
        if d.is_zero() {
            return Err(invalid(
                field,
                "0s would close every connection at once: give a duration such as \"60s\"",
            ));
        }
    }
    Ok(())
}

/// `[limits]`: the store buffer holds the largest object `[cache]` may store (`max_object_size`).
fn check_limits(l: &Limits, max_object_size: u64) -> Result<(), ConfigError> {
    if l.store_buffer_bytes < max_object_size {
        return Err(invalid(
            "limits.store_buffer_bytes",
            format!(
                "{} is less than cache.max_object_size ({max_object_size}): the largest object could never be stored",
                l.store_buffer_bytes
            ),
        ));
    }
    Ok(())
}

/// `[tls]`: a certificate with its key, and the default one before SNI or a plain listener.
fn check_tls(t: &TlsConfig) -> Result<(), ConfigError> {
    if t.cert.is_some() != t.key.is_some() {
        return Err(invalid(
            "tls",
            "cert and key go together: give both (--tls-cert and --tls-key) or neither",
        ));
    }
    if t.cert.is_none() && (!t.sni.is_empty() || t.plain_listen.is_some()) {
        return Err(invalid(
            "tls",
            "tls.sni and tls.plain_listen need tls.cert and tls.key (the default certificate)",
        ));
    }
    Ok(())
}

/// `[admission]`: a policy a proxy can apply, with a filter that can be built.
fn check_admission(a: &AdmissionConfig) -> Result<(), ConfigError> {
    // The proxy decides admission before it fetches, so it cannot know the size yet.
    if let Policy::Size(limit) = a.policy {
        return Err(invalid(
            "admission.policy",
            format!(
                "size:{limit} needs the object's size before the fetch, which a proxy does not have; \
                 set cache.max_object_size = {limit} instead (larger responses are streamed and not stored)"
            ),
        ));
    }
    // The filter's size comes from expected_items and fpr together; check it without
    // allocating the filter (exact policies have none).
    if a.policy.is_approximate() {
        a.settings()
            .filter_params()
            .map_err(|e| invalid("admission", format!("filter settings: {e}")))?;
    }
    Ok(())
}

/// `[lab]`: distinct shadows with filters that can be built (their defaults come from
/// `[admission]`), bounded queues and rotations, and room for one record.
fn check_lab(lab: &LabConfig, admission: &AdmissionConfig) -> Result<(), ConfigError> {
    for (i, spec) in lab.shadow.iter().enumerate() {
        if lab.shadow[..i].iter().any(|s| s.text == spec.text) {
            return Err(invalid(
                "lab.shadow",
                format!("{spec} is given twice (its metrics would be one series twice)"),
            ));
        }
        if spec.policy.is_approximate() {
            spec.settings(&admission.settings())
                .filter_params()
                .map_err(|e| invalid("lab.shadow", format!("{spec}: filter settings: {e}")))?;
        }
    }
    // Each queue's slots are allocated at start; each rotation renames every kept file.
    for (field, n) in [
        ("lab.shadow_queue", lab.shadow_queue),
        ("lab.record_queue", lab.record_queue),
    ] {
        if n > LabConfig::MAX_QUEUE {
            return Err(invalid(
                field,
                format!("{n} is more than {} sightings", LabConfig::MAX_QUEUE),
            ));
        }
    }
    if lab.record_keep > LabConfig::MAX_KEEP {
        return Err(invalid(
            "lab.record_keep",
            format!(
                "{} is more than {} files",
                lab.record_keep,
                LabConfig::MAX_KEEP
            ),
        ));
    }
    if lab.record.is_some() && lab.record_max_bytes < crate::lab::record::RECORD_BYTES {
        return Err(invalid(
            "lab.record_max_bytes",
            format!(
                "{} is less than one record ({} bytes)",
                lab.record_max_bytes,
                crate::lab::record::RECORD_BYTES
            ),
        ));
    }
    Ok(())
}

/// The admin token, from `admin_token` or the first line of `admin_token_file` (read here),
/// required when the admin listener is not on loopback.
fn admin_token(c: &Config) -> Result<Option<String>, ConfigError> {
    let token = match (&c.admin_token, &c.admin_token_file) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "admin_token_file",
                "set admin_token or admin_token_file, not both",
            ))
        }
        (Some(t), None) => Some(t.trim().to_string()),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.display().to_string(),
                source,
            })?;
            Some(text.lines().next().unwrap_or("").trim().to_string())
        }
        (None, None) => None,
    };
    if token.as_deref() == Some("") {
        return Err(invalid("admin_token", "is empty"));
    }
    if token.is_none() && !c.admin_listen.ip().is_loopback() {
        return Err(invalid(
            "admin_listen",
            format!(
                "{} is not a loopback address: purge, reload and metrics would be open to the network; set admin_token or admin_token_file",
                c.admin_listen
            ),
        ));
    }
    Ok(token)
}
