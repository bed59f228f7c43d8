//! Slices in the store and from the origin: what may be sliced, heads, one slice's fetch by a
//! `Range` request, its admission, storing and lookup.

use super::*;

impl Proxy {
    /// Whether a response for `headers` of `total` bytes may be stored in slices: storable as a
    /// whole 200 would be (any length), one version nameable, and not varying.
    pub(super) fn sliceable(
        &self,
        headers: &HeaderMap,
        total: u64,
        credentials: Credentials,
        live: &Live,
    ) -> Option<(Freshness, Version)> {
        if headers.contains_key(header::VARY) {
            return None;
        }
        let f = storability(
            StatusCode::OK,
            headers,
            credentials,
            &live.rules,
            SystemTime::now(),
        )
        .ok()?;
        Some((f, Version::of(headers, total)?))
    }

    /// A new head for an object stored in slices of `slice_size` bytes.
    pub(super) fn new_head(
        &self,
        headers: &HeaderMap,
        freshness: &Freshness,
        version: Version,
        slice_size: u64,
        live: &Live,
    ) -> Arc<Sliced> {
        let head = CachedObject::new(
            StatusCode::OK,
            whole_head(headers, version.total),
            Bytes::new(),
            self.clock.now(),
            freshness,
            live.stale_keep,
        );
        Arc::new(Sliced {
            head: Arc::new(head),
            version,
            slice_size,
        })
    }

    /// The head a stored slice (`index` of `slice_size`-byte slices) rebuilds: its fields, its
    /// freshness. `None` if it is not such a slice, or no longer fresh (the origin is asked).
    pub(super) fn head_of_slice(
        &self,
        obj: &CachedObject,
        index: u64,
        slice_size: u64,
    ) -> Option<Sliced> {
        self.head_of(obj, obj.body.len() as u64, index, slice_size)
    }

    /// [`Proxy::head_of_slice`] for a slice of `len` bytes (`obj` its head, its body perhaps
    /// still arriving).
    pub(super) fn head_of(
        &self,
        obj: &CachedObject,
        len: u64,
        index: u64,
        slice_size: u64,
    ) -> Option<Sliced> {
        let (start, end, total) = slice_range(obj)?;
        let (s, e) = slice_bounds(index, slice_size, total);
        let now = self.clock.now();
        if (start, end) != (s, e) || len != e - s + 1 || !obj.is_fresh(now) {
            return None;
        }
        let headers = whole_head(&obj.headers.to_map(), total);
        let version = Version::of(&headers, total)?;
        let freshness = fresh_for(obj.fresh_until.saturating_sub(now), obj);
        let keep = obj.keep_until.saturating_sub(obj.fresh_until);
        let head = CachedObject::new(StatusCode::OK, headers, Bytes::new(), now, &freshness, keep);
        Some(Sliced {
            head: Arc::new(head),
            version,
            slice_size,
        })
    }

    /// Removes an object stored in slices: its head and every slice, from memory and flash.
    pub(in crate::proxy) fn remove_sliced(&self, primary: &str, head: &Sliced) {
        let store = self.store.load();
        let cache = store.cache();
        if matches!(cache.get(primary), Some(Entry::Sliced(m)) if m.version == head.version) {
            cache.invalidate(primary);
        }
        for i in 0..head.count() {
            cache.invalidate(&slice_key(primary, i));
        }
        if let Some(d) = self.disk() {
            d.tier.purge_url(primary, self.now());
        }
    }

    /// Asks the origin for bytes `start..=end` of the target with a `Range` request; a 206 for
    /// them (or for `start` to the end of a shorter object) is read whole, within the budget of
    /// bodies buffered at once.
    pub(super) async fn fetch_range(
        &self,
        base: &HeaderMap,
        target: &Target,
        client: IpAddr,
        bounds: (u64, u64),
        live: &Live,
    ) -> Result<Reply, SliceError> {
        match self.range_head(base, target, client, bounds, live).await? {
            Reply::Part(p) => Ok(Reply::Part(self.read_part(p, target, live).await?)),
            Reply::Other(r) => Ok(Reply::Other(r)),
        }
    }

    /// [`Proxy::fetch_range`] up to the 206's head: checked (the bytes asked, or `start` to the
    /// end of a shorter object, of the length its range says) and twice its length reserved
    /// from the budget of bodies buffered at once; the body not read.
    pub(super) async fn range_head(
        &self,
        base: &HeaderMap,
        target: &Target,
        client: IpAddr,
        (start, end): (u64, u64),
        live: &Live,
    ) -> Result<Reply<PartHead>, SliceError> {
        let mut headers = base.clone();
        let range = HeaderValue::from_str(&format!("bytes={start}-{end}"))
            .map_err(|_| SliceError::Fetch(FetchError::Origin(OriginError::Other)))?;
        headers.insert(header::RANGE, range);
        let response = match live.origins.lean_pool() {
            Some(pool) => {
                let head = OriginHead {
                    method: &Method::GET,
                    headers: &headers,
                    target,
                    client,
                    forwarded: &live.forwarded,
                };
                let head = &head;
                self.upstream(
                    target.id,
                    target.origin,
                    true,
                    None,
                    live,
                    |server| async move {
                        pool.send_bodyless(server, head)
                            .await
                            .map_err(crate::origin::SendError::from)
                    },
                )
                .await
            }
            None => {
                let request = upstream_request(
                    Method::GET,
                    headers,
                    target,
                    client,
                    empty(),
                    &live.forwarded,
                )
                .map_err(|_| SliceError::Fetch(FetchError::Origin(OriginError::Other)))?;
                self.get_upstream(&request, target, live).await
            }
        }
        .map_err(SliceError::Fetch)?;
        if response.status() != StatusCode::PARTIAL_CONTENT {
            return Ok(Reply::Other(response));
        }
        let (mut parts, body) = response.into_parts();
        let expected = response_head(parts.status, &mut parts.headers, false);
        let range = parts
            .headers
            .get(header::CONTENT_RANGE)
            .and_then(content_range);
        // The bytes asked for, or up to the end of a shorter object; nothing else is a slice.
        let Some((first, last, total)) =
            range.filter(|&(f, l, t)| f == start && (l == end || (l < end && l + 1 == t)))
        else {
            return Err(broken(target, "a 206 for another range than asked"));
        };
        let len = last - first + 1;
        if expected != Some(len) {
            return Err(broken(target, "a 206 whose length is not its range's"));
        }
        // Twice the length, as a whole body being stored: the chunks its readers share as they
        // arrive, and the one buffer stored (within the largest object, which the budget holds).
        let want = len.saturating_mul(2).min(live.limits.max_object.max(len));
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        let permit = tokio::time::timeout(
            live.timeouts.first_byte,
            Arc::clone(&live.store_budget).acquire_many_owned(want),
        )
        .await;
        let Ok(Ok(permit)) = permit else {
            self.metrics.store_over_budget();
            return Err(SliceError::Busy);
        };
        Ok(Reply::Part(PartHead {
            headers: parts.headers,
            start: first,
            end: last,
            total,
            body,
            permit,
        }))
    }

    /// The body of a 206 [`Proxy::range_head`] checked, read whole within `first_byte` a frame:
    /// exactly the bytes its range says, or the origin is broken.
    pub(super) async fn read_part(
        &self,
        part: PartHead,
        target: &Target,
        live: &Live,
    ) -> Result<Part, SliceError> {
        let PartHead {
            headers,
            start,
            end,
            total,
            mut body,
            permit: _permit,
        } = part;
        let len = end - start + 1;
        let mut bytes = BytesMut::with_capacity(usize::try_from(len).unwrap_or(0));
        let failure = loop {
            match tokio::time::timeout(live.timeouts.first_byte, body.frame()).await {
                Ok(None) => break None,
                Ok(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        if bytes.len() as u64 + data.len() as u64 > len {
                            break Some("a 206 longer than its range");
                        }
                        bytes.extend_from_slice(data);
                    }
                }
                Ok(Some(Err(_))) => break Some("the body broke off"),
                Err(_) => break Some("the body stalled"),
            }
        };
        self.metrics.origin_bytes(bytes.len() as u64);
        let failure =
            failure.or((bytes.len() as u64 != len).then_some("a 206 shorter than its range"));
        if let Some(why) = failure {
            return Err(broken(target, why));
        }
        Ok(Part {
            headers,
            start,
            end,
            total,
            body: bytes.freeze(),
        })
    }

    /// Stores slice `index` of `head` where its admission said (`tiers`); hands it to the
    /// followers of its fetch (`leader`).
    pub(super) fn store_slice(
        &self,
        primary: &str,
        head: &Sliced,
        index: u64,
        body: Bytes,
        (tiers, leader): (Tiers, Leader),
        live: &Live,
    ) {
        let now = self.clock.now();
        let body = tiers.stored_body(live.sendfile, body);
        let object = Arc::new(slice_object(head, index, body, now, live));
        let key = slice_key(primary, index);
        let len = object.body.len() as u64;
        match (tiers, self.disk()) {
            (Tiers::DiskOnly, Some(d)) => {
                if d.tier.reserve(len, now) != crate::disk::Written::Queued {
                    return;
                }
                d.tier.write_reserved(&key, &object);
            }
            (Tiers::DiskOnly, None) => return,
            (Tiers::MemoryThenDisk, _) => {
                object
                    .bound_for_disk
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                self.store
                    .load()
                    .insert(key.clone(), Entry::Object(Arc::clone(&object)));
                self.metrics.stored(len);
            }
            (Tiers::Memory, _) => {
                self.store
                    .load()
                    .insert(key.clone(), Entry::Object(Arc::clone(&object)));
                self.metrics.stored(len);
            }
        }
        leader.complete(Arc::new(Fetched {
            object,
            primary: key.clone(),
            key,
        }));
    }

    /// The memory and flash policies' word on slice `id`: where it goes, `None` if neither
    /// admits it.
    pub(super) fn admit_slice(&self, id: u64) -> Option<Tiers> {
        let now = self.clock.now();
        let hash = KeyHash::of_u64(id);
        let memory = self.admission.on_miss(hash, now) != Decision::Defer;
        let disk = self
            .disk
            .as_ref()
            .is_some_and(|d| d.admission.on_miss(hash, now) != Decision::Defer);
        match (memory, disk) {
            (true, disk) => Some(Tiers::memory(disk)),
            (false, true) => Some(Tiers::DiskOnly),
            (false, false) => None,
        }
    }

    /// Counts a slice looked up for a request: one sighting for the lab, one for the metrics.
    pub(super) fn slice_seen(&self, id: u64, len: u64, source: SliceSource) {
        self.sight(id, len, true);
        self.metrics.slice(source, len);
    }

    /// Slice `index` of the object under `primary` as stored: in memory, else on flash (and
    /// promoted to memory if the memory policy admits it). With `head`, only a slice of its
    /// version and bounds; without, any fresh slice of `slice_size` bytes that names its
    /// version (a head is rebuilt from it). Counted when found.
    pub(super) async fn stored_slice(
        &self,
        primary: &str,
        index: u64,
        id: u64,
        slice_size: u64,
        head: Option<&Sliced>,
    ) -> Option<(Arc<CachedObject>, SliceSource)> {
        let key = slice_key(primary, index);
        let fits = |o: &CachedObject| match head {
            Some(h) => h.holds(o, index),
            None => self.head_of_slice(o, index, slice_size).is_some(),
        };
        let mut found = None;
        if let Some(Entry::Object(o)) = self.store.load().get(&key) {
            if fits(&o) {
                found = Some((o, SliceSource::Memory));
            }
        }
        if found.is_none() {
            if let Some(d) = self.disk() {
                if let Some(o) = d.tier.get(&key).await {
                    if !d.purged(&key, &o) && fits(&o) {
                        let now = self.clock.now();
                        if self.admission.on_miss(KeyHash::of_u64(id), now) != Decision::Defer {
                            // On the heap, as a promoted whole object (see `disk_hit`).
                            self.store
                                .load()
                                .insert(key.clone(), Entry::Object(Arc::clone(&o)));
                        }
                        found = Some((o, SliceSource::Disk));
                    }
                }
            }
        }
        let (o, source) = found?;
        self.slice_seen(id, o.body.len() as u64, source);
        Some((o, source))
    }

    /// Slice `index` of the object `ctx` answers for: from memory, flash, another request's
    /// fetch (as its bytes arrive) or the origin (streamed as they arrive, and stored once whole
    /// if admitted).
    pub(super) async fn slice_bytes(
        self: &Arc<Self>,
        ctx: &SliceCtx,
        index: u64,
    ) -> Result<(SliceData, SliceSource), SliceError> {
        let head = &ctx.head;
        let id = slice_id(ctx.id, index);
        let found = self
            .stored_slice(&ctx.primary, index, id, head.slice_size, Some(head))
            .await;
        if let Some((o, source)) = found {
            return Ok((SliceData::Whole(o.body.clone()), source));
        }
        let (start, end) = head.bounds(index);
        let len = end - start + 1;
        let tiers = self.admit_slice(id);
        let key = slice_key(&ctx.primary, index);
        let leader = match tiers.map(|_| self.inflight.join(&key)) {
            Some(Role::Leader(l)) => Some(l),
            Some(Role::Follower(f)) => {
                let data = match f
                    .join(ctx.live.timeouts.coalesce_wait, &HeaderMap::new())
                    .await
                {
                    Some(Joined::Stored(got)) if head.holds(&got.object, index) => {
                        Some(SliceData::Whole(got.object.body.clone()))
                    }
                    Some(Joined::Streaming(s))
                        if head.heads(&s.head, index) && s.body.expected() == len =>
                    {
                        Some(SliceData::Arriving(s.body.reader()))
                    }
                    _ => None,
                };
                if let Some(data) = data {
                    self.metrics.coalesced();
                    self.slice_seen(id, len, SliceSource::Collapsed);
                    return Ok((data, SliceSource::Collapsed));
                }
                None
            }
            None => None,
        };
        self.slice_seen(id, len, SliceSource::Origin);
        let reply = self
            .range_head(&ctx.base, &ctx.target, ctx.client, (start, end), &ctx.live)
            .await?;
        let part = match reply {
            Reply::Part(p)
                if p.start == start
                    && p.end == end
                    && Version::of(&p.headers, p.total).as_ref() == Some(&head.version) =>
            {
                p
            }
            Reply::Part(p) => {
                tracing::info!(key = %ctx.primary, "a slice of another version: the stored object is dropped");
                self.metrics.slice_version_changed();
                self.remove_sliced(&ctx.primary, head);
                let p = self.read_part(p, &ctx.target, &ctx.live).await?;
                return Err(SliceError::Changed(Some(p)));
            }
            Reply::Other(r) => {
                tracing::info!(key = %ctx.primary, status = %r.status(), "the origin no longer answers a slice with 206: the stored object is dropped");
                self.metrics.slice_version_changed();
                self.remove_sliced(&ctx.primary, head);
                return Err(SliceError::Changed(None));
            }
        };
        let storable = self
            .sliceable(&part.headers, part.total, ctx.credentials, &ctx.live)
            .is_some();
        let store = match (leader, tiers, storable) {
            (Some(l), Some(tiers), true) => Some((tiers, l)),
            _ => None,
        };
        let reader = self.stream_slice(ctx, index, part, store);
        Ok((SliceData::Arriving(reader), SliceSource::Origin))
    }

    /// Reads slice `index` of `ctx`'s object (`part`, of the head's version) at the origin's
    /// pace into a [`Growing`] buffer, by a task: the request's reader of it is returned, the
    /// followers of the fetch (`store`'s leader) stream from it as it arrives, and once whole
    /// it is stored where `store` says. A body that breaks off, stalls or has the wrong length
    /// cuts every reader and is not stored.
    pub(super) fn stream_slice(
        self: &Arc<Self>,
        ctx: &SliceCtx,
        index: u64,
        part: PartHead,
        store: Option<(Tiers, Leader)>,
    ) -> GrowingBody {
        let growing = Growing::new(part.end - part.start + 1);
        if let Some((_, leader)) = &store {
            let key = slice_key(&ctx.primary, index);
            let head = slice_object(&ctx.head, index, Bytes::new(), self.clock.now(), &ctx.live);
            leader.streaming(Arc::new(Streaming {
                head: Arc::new(head),
                primary: key.clone(),
                key,
                body: Arc::clone(&growing),
            }));
        }
        let reader = growing.reader();
        let filler = growing.filler();
        let proxy = Arc::clone(self);
        let (primary, head, live) = (
            ctx.primary.clone(),
            Arc::clone(&ctx.head),
            Arc::clone(&ctx.live),
        );
        tokio::spawn(async move {
            let PartHead {
                mut body, permit, ..
            } = part;
            match proxy
                .fill(&mut body, &filler, live.timeouts.first_byte)
                .await
            {
                Ok(last) => {
                    let seal = store.as_ref().is_some_and(|(t, _)| t.seals(live.sendfile));
                    let whole = filler.assemble(last, seal);
                    if let Some(store) = store {
                        proxy.store_slice(&primary, &head, index, whole.clone(), store, &live);
                    }
                    filler.finish(whole);
                }
                Err(why) => {
                    tracing::warn!(key = %primary, index, why, "a slice broke off");
                    proxy.metrics.origin_error(OriginError::Body);
                    filler.fail(why);
                }
            }
            drop(permit);
        });
        reader
    }
}

/// An origin that broke the rules of a slice's answer (logged): an origin failure.
fn broken(target: &Target, why: &str) -> SliceError {
    tracing::warn!(url = %target.key, why, "a broken slice from the origin");
    SliceError::Fetch(FetchError::Origin(OriginError::Body))
}

/// Slice `index` of `head` as it is stored at `now`: the head's fields with the slice's own
/// `Content-Range` and `Content-Length`, the head's freshness; `body` its bytes (empty for the
/// head of a slice still arriving).
fn slice_object(
    head: &Sliced,
    index: u64,
    body: Bytes,
    now: Duration,
    live: &Live,
) -> CachedObject {
    let (start, end) = head.bounds(index);
    let mut headers = head.head.headers.to_map();
    headers.insert(
        header::CONTENT_RANGE,
        HeaderValue::try_from(format!("bytes {start}-{end}/{}", head.total()))
            .unwrap_or_else(|_| HeaderValue::from_static("bytes */0")),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start + 1));
    CachedObject::new(
        StatusCode::PARTIAL_CONTENT,
        headers,
        body,
        now,
        &fresh_for(head.head.fresh_until.saturating_sub(now), &head.head),
        live.stale_keep,
    )
}
