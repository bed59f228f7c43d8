//! Answering from a sliced object's head: its freshness confirmed, the request's conditions and
//! range against it, the first slice before the head goes out and the rest streamed.

use super::*;

impl Proxy {
    /// The context of a sliced answer of `head` to the request `parts`.
    pub(super) fn slice_ctx(
        &self,
        parts: &Parts,
        target: &Target,
        client: IpAddr,
        live: &Arc<Live>,
        head: Arc<Sliced>,
    ) -> SliceCtx {
        let (base, credentials, budget) = request_base(parts, live);
        SliceCtx {
            head,
            primary: target.key.clone(),
            id: target.id,
            target: target.clone(),
            client,
            base,
            credentials,
            budget,
            live: Arc::clone(live),
        }
    }

    /// A GET or HEAD of an object stored in slices (`head` under `key`). A stale head, or a
    /// request with `no-cache`, is confirmed by the first slice the request needs, fetched from
    /// the origin: the same version refreshes the head, another replaces the object.
    pub(in crate::proxy) async fn serve_sliced(
        self: &Arc<Self>,
        parts: Parts,
        target: &Target,
        client: IpAddr,
        key: String,
        head: Arc<Sliced>,
        live: &Arc<Live>,
    ) -> Answer {
        let mut ctx = self.slice_ctx(&parts, target, client, live, head);
        ctx.primary = key;
        let now = self.clock.now();
        let no_cache = crate::http_cache::request_plan(&parts.method, &parts.headers, false)
            == RequestPlan::Refresh;
        if ctx.head.head.is_fresh(now) && !no_cache {
            return self.answer_sliced(parts, ctx, None).await;
        }
        let index = ctx
            .head
            .range_of(&parts.headers)
            .map_or(0, |(s, _)| s / ctx.head.slice_size);
        let id = slice_id(ctx.id, index);
        let bounds = ctx.head.bounds(index);
        self.slice_seen(id, bounds.1 - bounds.0 + 1, SliceSource::Origin);
        let part = match self
            .fetch_range(&ctx.base, target, client, bounds, live)
            .await
        {
            Ok(Reply::Part(p)) => p,
            Ok(Reply::Other(_)) => {
                self.remove_sliced(&ctx.primary, &ctx.head);
                return self.slice_failed(SliceError::Changed(None));
            }
            Err(e) => return self.slice_failed(e),
        };
        let size = ctx.head.slice_size;
        let fresh = self
            .sliceable(&part.headers, part.total, ctx.credentials, live)
            .filter(|_| (part.start, part.end) == slice_bounds(index, size, part.total));
        if fresh.as_ref().is_none_or(|(_, v)| *v != ctx.head.version) {
            self.metrics.slice_version_changed();
            self.remove_sliced(&ctx.primary, &ctx.head);
        }
        let Some((f, v)) = fresh else {
            return self.slice_failed(SliceError::Changed(None));
        };
        let head = self.new_head(&part.headers, &f, v, size, live);
        self.store
            .load()
            .insert(ctx.primary.clone(), Entry::Sliced(Arc::clone(&head)));
        ctx.head = head;
        let first = (index, SliceData::Whole(part.body), SliceSource::Origin);
        self.answer_sliced(parts, ctx, Some(first)).await
    }

    /// A slice that could not be had before anything was sent: 502 / 504 for the origin's
    /// failure, 503 (retry) when busy or when the object changed under us.
    pub(super) fn slice_failed(&self, e: SliceError) -> Answer {
        let why = match e {
            SliceError::Fetch(e) => return self.fetch_failed(e),
            SliceError::Busy => "the cache is reading too many slices at once: retry\n",
            SliceError::Changed(_) => "the object changed while it was read: retry\n",
        };
        let mut response = text(StatusCode::SERVICE_UNAVAILABLE, why);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        Answer {
            response,
            outcome: Outcome::Error,
            status: CacheStatus::forwarded(Fwd::Miss, Some("slice")),
            sight: Sight::Skip,
        }
    }

    /// The answer from a head: preconditions and the range against it, the first slice's
    /// version settled before the head goes out (from `first` if it is that slice), its bytes
    /// and the rest streamed by a task. A first slice of another version starts the answer
    /// again from that version.
    pub(super) async fn answer_sliced(
        self: &Arc<Self>,
        parts: Parts,
        ctx: SliceCtx,
        first: Option<Got>,
    ) -> Answer {
        let mut ctx = ctx;
        let mut first = first;
        // Once from a changed object's new version, no more.
        for _ in 0..2 {
            let plan = match self.plan_sliced(&parts, &ctx) {
                Planned::Send(plan) => plan,
                Planned::Answered(answer) => return answer,
            };
            let got = match first.take() {
                Some((i, b, s)) if i == plan.first_index() => Ok((b, s)),
                _ => self.slice_bytes(&ctx, plan.first_index()).await,
            };
            match got {
                Ok((bytes, source)) => return self.send_sliced(plan, ctx, bytes, source),
                Err(SliceError::Changed(Some(p))) => {
                    let index = plan.first_index();
                    let size = ctx.head.slice_size;
                    match self.sliceable(&p.headers, p.total, ctx.credentials, &ctx.live) {
                        Some((f, v)) if (p.start, p.end) == slice_bounds(index, size, p.total) => {
                            let head = self.new_head(&p.headers, &f, v, size, &ctx.live);
                            self.store
                                .load()
                                .insert(ctx.primary.clone(), Entry::Sliced(Arc::clone(&head)));
                            ctx.head = head;
                            first = Some((index, SliceData::Whole(p.body), SliceSource::Origin));
                        }
                        _ => return self.slice_failed(SliceError::Changed(None)),
                    }
                }
                Err(e) => return self.slice_failed(e),
            }
        }
        self.slice_failed(SliceError::Changed(None))
    }

    /// What a request asks of a sliced object: an answer that sends no slice (304, 412, 416,
    /// HEAD), or the status, fields and bytes of one that does.
    pub(super) fn plan_sliced(&self, parts: &Parts, ctx: &SliceCtx) -> Planned {
        let m = &ctx.head;
        let now = self.clock.now();
        let total = m.total();
        let status = CacheStatus::hit(m.head.ttl(now));
        let stored = Validators {
            etag: m.head.headers.get(&header::ETAG),
            last_modified: m.head.headers.get(&header::LAST_MODIFIED),
            date: m.head.headers.get(&header::DATE),
        };
        let range = if is_conditional(&parts.headers) {
            match conditional_answer(
                &parts.method,
                StatusCode::OK,
                &parts.headers,
                &stored,
                total,
            ) {
                Conditional::Send(r) => r,
                Conditional::PreconditionFailed => {
                    let r = text(StatusCode::PRECONDITION_FAILED, "precondition failed\n");
                    return Planned::Answered(sliced_plain(r, status));
                }
                Conditional::NotModified => {
                    let mut r = Response::new(empty());
                    *r.status_mut() = StatusCode::NOT_MODIFIED;
                    for name in [
                        header::ETAG,
                        header::LAST_MODIFIED,
                        header::CACHE_CONTROL,
                        header::DATE,
                        header::EXPIRES,
                    ] {
                        if let Some(v) = m.head.headers.get(&name) {
                            r.headers_mut().insert(name, v);
                        }
                    }
                    return Planned::Answered(sliced_plain(r, status));
                }
            }
        } else {
            RangeAnswer::Full
        };
        let mut headers = m.head.headers.to_map();
        headers.insert(header::AGE, HeaderValue::from(m.head.age(now).as_secs()));
        let (code, start, end) = match range {
            RangeAnswer::Full => (StatusCode::OK, 0, total - 1),
            RangeAnswer::Partial {
                start,
                end,
                content_range,
            } => {
                headers.insert(header::CONTENT_RANGE, content_range);
                (StatusCode::PARTIAL_CONTENT, start, end)
            }
            RangeAnswer::Unsatisfiable { content_range } => {
                let mut r = text(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable\n");
                r.headers_mut().insert(header::CONTENT_RANGE, content_range);
                return Planned::Answered(sliced_plain(r, status));
            }
        };
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start + 1));
        if parts.method == Method::HEAD {
            let mut r = Response::new(empty());
            *r.status_mut() = code;
            *r.headers_mut() = headers;
            return Planned::Answered(sliced_plain(r, status));
        }
        Planned::Send(SlicePlan {
            code,
            headers,
            span: Span {
                start,
                end,
                slice_size: m.slice_size,
                total,
            },
        })
    }

    /// The response of `plan` once its first slice is in hand (`first`, perhaps still
    /// arriving): the head now, the slices' bytes by a task as they arrive, at the client's pace
    /// (one slice ahead at most).
    pub(super) fn send_sliced(
        self: &Arc<Self>,
        plan: SlicePlan,
        ctx: SliceCtx,
        first: SliceData,
        source: SliceSource,
    ) -> Answer {
        let SlicePlan {
            code,
            headers,
            span,
        } = plan;
        let (i0, i1) = (span.first_index(), span.end / span.slice_size);
        let mut hits = Vec::new();
        let mut misses = Vec::new();
        if source == SliceSource::Origin {
            misses.push(i0);
        } else {
            hits.push(i0);
        }
        {
            // Asked without touching them: a read here would make them recent before their
            // turn, and the store's eviction order would not be the one their requests make.
            let store = self.store.load();
            for i in i0 + 1..=i1 {
                let key = slice_key(&ctx.primary, i);
                let held = store.cache().contains_key(&key)
                    || self.disk().is_some_and(|d| d.tier.may_hold(&key));
                if held {
                    hits.push(i);
                } else {
                    misses.push(i);
                }
            }
        }
        let (outcome, status) = if misses.is_empty() {
            (
                Outcome::Hit,
                CacheStatus::hit(ctx.head.head.ttl(self.clock.now())),
            )
        } else if hits.is_empty() {
            (Outcome::Miss, CacheStatus::forwarded(Fwd::UriMiss, None))
        } else {
            (Outcome::Miss, CacheStatus::forwarded(Fwd::Partial, None))
        };
        let body = match first {
            SliceData::Whole(bytes) if i0 == i1 => full(span.piece(i0, bytes)),
            first => {
                let len = Some(span.end - span.start + 1);
                let (tx, rx) = match &ctx.budget {
                    Some(b) => channel_within(2, len, b),
                    None => channel(2, len, Some(ctx.live.limits.stream_buffer)),
                };
                let proxy = Arc::clone(self);
                tokio::spawn(async move {
                    let (mut i, mut data) = (i0, first);
                    loop {
                        match span.send(&tx, i, data).await {
                            Ok(()) => {}
                            Err(None) => return,
                            Err(Some(why)) => return cut(&tx, why).await,
                        }
                        i += 1;
                        if i > i1 || tx.is_closed() {
                            return;
                        }
                        data = match proxy.slice_bytes(&ctx, i).await {
                            Ok((d, _)) => d,
                            Err(e) => {
                                let why = cut_reason(&e);
                                if let SliceError::Fetch(f) = e {
                                    proxy.count_fetch_failure(f);
                                }
                                return cut(&tx, why).await;
                            }
                        };
                    }
                });
                rx.boxed()
            }
        };
        let mut response = Response::new(body);
        *response.status_mut() = code;
        *response.headers_mut() = headers;
        response
            .extensions_mut()
            .insert(SliceDetail::of(&hits, &misses));
        Answer {
            response,
            outcome,
            status,
            sight: Sight::Skip,
        }
    }
}
