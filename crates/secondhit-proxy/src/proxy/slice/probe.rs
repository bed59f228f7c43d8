//! A GET miss while slicing is on: the slice holding the first byte wanted tells how long the
//! object is, and so whether it is stored whole, in slices, or not at all.

use super::*;

impl Proxy {
    /// Phases 4 on for a GET miss while slicing is on: the slice holding byte `start`, from a
    /// slice still stored (its head lost) or the origin; then the request is answered as a
    /// whole object (one slice or less), in slices, or (not sliceable) from the probe's bytes
    /// or by forwarding it as it came.
    pub(in crate::proxy) async fn probe(
        self: &Arc<Self>,
        parts: Parts,
        body: Incoming,
        target: &Target,
        client: IpAddr,
        start: u64,
        live: &Arc<Live>,
    ) -> Answer {
        let size = live.slice_size;
        let index = start / size;
        let id = slice_id(target.id, index);
        if let Some((o, source)) = self.stored_slice(&target.key, index, id, size, None).await {
            if let Some(head) = self.head_of_slice(&o, index, size) {
                let head = Arc::new(head);
                self.store
                    .load()
                    .insert(target.key.clone(), Entry::Sliced(Arc::clone(&head)));
                let ctx = self.slice_ctx(&parts, target, client, live, head);
                return self
                    .answer_sliced(
                        parts,
                        ctx,
                        Some((index, SliceData::Whole(o.body.clone()), source)),
                    )
                    .await;
            }
        }
        let tiers = self.admit_slice(id);
        let key = slice_key(&target.key, index);
        let leader = match tiers.map(|_| self.inflight.join(&key)) {
            Some(Role::Leader(l)) => Some(l),
            Some(Role::Follower(f)) => {
                let got = f.join(live.timeouts.coalesce_wait, &parts.headers).await;
                match self.follow_probe(got, &parts, target, index, size) {
                    Some(Followed::Whole(answer)) => return answer,
                    Some(Followed::Slice(head, got)) => {
                        let ctx = self.slice_ctx(&parts, target, client, live, head);
                        return self.answer_sliced(parts, ctx, Some(got)).await;
                    }
                    None => None,
                }
            }
            None => None,
        };
        let (base, credentials, budget) = request_base(&parts, live);
        let bounds = (
            index * size,
            index.saturating_mul(size).saturating_add(size - 1),
        );
        let reply = match self.range_head(&base, target, client, bounds, live).await {
            Ok(r) => r,
            Err(e) => return self.slice_failed(e),
        };
        let part = match reply {
            Reply::Part(p) => p,
            // A 200 (the origin ignores ranges) or an error status: what any miss gets.
            Reply::Other(response) => {
                let exchange = Exchange {
                    intent: if tiers.is_some() {
                        Intent::Admitted
                    } else {
                        Intent::Deferred
                    },
                    leader,
                    request_headers: base,
                    credentials,
                    upstream_head: false,
                    client_head: false,
                    sight: true,
                    tiers: tiers.unwrap_or_default(),
                    budget,
                };
                return self.respond(response, target, exchange, live).await;
            }
        };
        let sliced = match part.total > size {
            true => self.sliceable(&part.headers, part.total, credentials, live),
            false => None,
        };
        let Some((freshness, version)) = sliced else {
            // One slice or less, or not to be sliced: its bytes are needed whole.
            let part = match self.read_part(part, target, live).await {
                Ok(p) => p,
                Err(e) => return self.slice_failed(e),
            };
            if part.total <= size {
                let whole = Whole {
                    base,
                    credentials,
                    tiers,
                    leader,
                };
                return self.whole_from_probe(&parts, target, part, whole, live);
            }
            drop(leader);
            return self
                .unsliceable(parts, body, target, client, part, tiers, live)
                .await;
        };
        let head = self.new_head(&part.headers, &freshness, version, size, live);
        self.store
            .load()
            .insert(target.key.clone(), Entry::Sliced(Arc::clone(&head)));
        self.slice_seen(id, part.end - part.start + 1, SliceSource::Origin);
        let ctx = self.slice_ctx(&parts, target, client, live, head);
        let store = match (leader, tiers) {
            (Some(l), Some(tiers)) => Some((tiers, l)),
            _ => None,
        };
        let reader = self.stream_slice(&ctx, index, part, store);
        let first = (index, SliceData::Arriving(reader), SliceSource::Origin);
        self.answer_sliced(parts, ctx, Some(first)).await
    }

    /// What a probe's follower takes from the leader's fetch: a whole object, answered, or the
    /// slice (stored, or its bytes as they arrive) with the head it rebuilds; `None`: fetch for
    /// ourselves.
    pub(super) fn follow_probe(
        &self,
        got: Option<Joined>,
        parts: &Parts,
        target: &Target,
        index: u64,
        slice_size: u64,
    ) -> Option<Followed> {
        let (head, data) = match got? {
            Joined::Stored(got) if got.object.status != StatusCode::PARTIAL_CONTENT => {
                self.metrics.coalesced();
                return Some(Followed::Whole(self.hit(
                    &got.object,
                    parts,
                    Some("collapsed"),
                )));
            }
            Joined::Stored(got) => (
                self.head_of_slice(&got.object, index, slice_size)?,
                SliceData::Whole(got.object.body.clone()),
            ),
            Joined::Streaming(s) => (
                self.head_of(&s.head, s.body.expected(), index, slice_size)?,
                SliceData::Arriving(s.body.reader()),
            ),
        };
        self.metrics.coalesced();
        let id = slice_id(target.id, index);
        let (start, end) = head.bounds(index);
        self.slice_seen(id, end - start + 1, SliceSource::Collapsed);
        Some(Followed::Slice(
            Arc::new(head),
            (index, data, SliceSource::Collapsed),
        ))
    }

    /// A probe's 206 that holds the whole object: a miss of that object like any other (stored
    /// whole if admitted and storable), the client answered from its bytes.
    pub(super) fn whole_from_probe(
        &self,
        parts: &Parts,
        target: &Target,
        part: Part,
        whole: Whole,
        live: &Live,
    ) -> Answer {
        let Whole {
            base,
            credentials,
            tiers,
            leader,
        } = whole;
        let headers = whole_head(&part.headers, part.total);
        let head = ResponseHead {
            status: StatusCode::OK,
            headers: &headers,
            length: Some(part.total),
            close_delimited: false,
        };
        let intent = if tiers.is_some() {
            Intent::Admitted
        } else {
            Intent::Deferred
        };
        let mut c = classify(
            intent,
            head,
            credentials,
            &live.rules,
            live.limits.max_object,
            SystemTime::now(),
        );
        let tiers = tiers.unwrap_or_default();
        if c.store.is_some() && tiers == Tiers::DiskOnly {
            self.settle_disk_only(&mut c, Some(part.total), false);
        }
        let storable = matches!(c.outcome, Outcome::Miss | Outcome::Deferred);
        let now = self.clock.now();
        let zero = Freshness {
            lifetime: Duration::ZERO,
            initial_age: Duration::ZERO,
            no_cache: false,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
        };
        let served = CachedObject::new(
            StatusCode::OK,
            headers.clone(),
            part.body.clone(),
            now,
            c.store.as_ref().unwrap_or(&zero),
            Duration::ZERO,
        );
        if let Some(freshness) = c.store {
            let job = StoreJob {
                primary: target.key.clone(),
                request_headers: base,
                status: StatusCode::OK,
                headers,
                freshness,
                leader,
                tiers,
            };
            self.store_object(job, part.body, live);
        }
        let (response, _) = hit::serve(&served, &parts.method, &parts.headers, now);
        Answer {
            response,
            outcome: c.outcome,
            status: c.status,
            sight: Sight::Now {
                size: part.total,
                storable,
                kept: Kept {
                    // Only the recording reads it.
                    head: if self.lab.is_on() {
                        served.headers.weight()
                    } else {
                        0
                    },
                    fresh_for: c.fresh.map(|f| f.lifetime.saturating_sub(f.initial_age)),
                    hit: false,
                },
            },
        }
    }

    /// A probe's 206 for an object that may not be stored in slices: the client's range from
    /// its bytes when they hold it, else the request forwarded as it came (as any miss: stored
    /// whole if it is small enough and storable).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn unsliceable(
        self: &Arc<Self>,
        parts: Parts,
        body: Incoming,
        target: &Target,
        client: IpAddr,
        part: Part,
        tiers: Option<Tiers>,
        live: &Arc<Live>,
    ) -> Answer {
        let wanted = match range_answer(parts.headers.get(header::RANGE), part.total) {
            RangeAnswer::Partial {
                start,
                end,
                content_range,
            } if parts.headers.get(header::IF_RANGE).is_none() => Some((start, end, content_range)),
            _ => None,
        };
        if let Some((start, end, content_range)) =
            wanted.filter(|&(s, e, _)| s >= part.start && e <= part.end)
        {
            let from = usize::try_from(start - part.start).unwrap_or(usize::MAX);
            let to = usize::try_from(end - part.start).unwrap_or(usize::MAX);
            let bytes = part.body.slice(from..=to);
            let mut headers = whole_head(&part.headers, bytes.len() as u64);
            headers.insert(header::CONTENT_RANGE, content_range);
            let mut response = Response::new(full(bytes));
            *response.status_mut() = StatusCode::PARTIAL_CONTENT;
            *response.headers_mut() = headers;
            return Answer {
                response,
                outcome: Outcome::Bypass,
                status: CacheStatus::forwarded(Fwd::UriMiss, Some("not-sliceable")),
                sight: Sight::Skip,
            };
        }
        let intent = match (parts.headers.contains_key(header::RANGE), tiers) {
            (true, _) => Intent::Bypass(NoStore::Range),
            (false, Some(_)) => Intent::Admitted,
            (false, None) => Intent::Deferred,
        };
        let storing = Storing {
            leader: None,
            tiers: tiers.unwrap_or_default(),
        };
        self.forward(parts, body, target, client, intent, storing, live)
            .await
    }
}
