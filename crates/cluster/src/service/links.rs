//! Peer links: long-lived TCP connections to the other nodes (emulated
//! WAN delay and loss, bounded queues), and every frame that arrives on
//! them.

use super::routing::busy_answer;
use super::*;

/// Writes and flushes (TLS holds records back until flushed).
async fn write_out<W: tokio::io::AsyncWrite + Unpin>(
    wr: &mut W,
    buf: &[u8],
) -> std::io::Result<()> {
    wr.write_all(buf).await?;
    wr.flush().await
}

impl Link {
    /// Fails every request still awaiting an answer on this link (the
    /// callers see the shard as gone). The completers run after the lock
    /// is let go: one may send again.
    fn fail_pending(&self) {
        let pending: Vec<Completer> = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, (_, c))| c)
            .collect();
        drop(pending);
    }
}

impl Cluster {
    pub(super) fn link(self: &Arc<Self>, node: NodeId) -> Option<Arc<Link>> {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let ring = self.ring.load();
        let member = ring.member(node);
        if let Some(l) = links.get(&node) {
            match l.state.load(Ordering::SeqCst) {
                LINK_OPEN => return Some(l.clone()),
                // Back before the link's task ended: the same link (and
                // stream) again, so what it still has queued goes first.
                LINK_CLOSING
                    if member.is_some_and(|m| m.peer == l.addr)
                        && l.state
                            .compare_exchange(
                                LINK_CLOSING,
                                LINK_OPEN,
                                Ordering::SeqCst,
                                Ordering::SeqCst,
                            )
                            .is_ok() =>
                {
                    return Some(l.clone());
                }
                _ => {}
            }
        }
        let m = member?;
        let (tx, rx) = mpsc::unbounded_channel();
        let link = Arc::new(Link {
            node,
            addr: m.peer,
            region: m.region.clone(),
            tx,
            queued: AtomicUsize::new(0),
            pending: Mutex::new(HashMap::new()),
            connected: AtomicBool::new(false),
            unreachable: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            state: AtomicU8::new(LINK_OPEN),
        });
        links.insert(node, link.clone());
        self.handle.spawn(self.clone().run_link(link.clone(), rx));
        Some(link)
    }

    /// Queues a frame; false when it was dropped (queue full, emulated loss
    /// or a cut link).
    pub(super) fn send(self: &Arc<Self>, node: NodeId, frame: Frame, lossy: bool) -> bool {
        match self.link(node) {
            Some(link) => self.send_on(&link, frame, lossy),
            None => false,
        }
    }

    /// [`Cluster::send`] on a link in hand (a request's answer comes back
    /// on the link that awaits it).
    pub(super) fn send_on(&self, link: &Link, frame: Frame, lossy: bool) -> bool {
        if self.cut(&link.region) {
            return false;
        }
        if lossy
            && self.other_region(&link.region)
            && self.settings.wan_loss_percent > 0.0
            && rand::random::<f64>() * 100.0 < self.settings.wan_loss_percent
        {
            link.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if lossy && link.queued.load(Ordering::Relaxed) >= LINK_QUEUE {
            // A slow or dead peer: drop, anti-entropy will repair.
            link.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let out = Out {
            frame,
            at: Instant::now(),
        };
        link.queued.fetch_add(1, Ordering::Relaxed);
        if link.tx.send(out).is_err() {
            link.queued.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub(super) fn delay_for(&self, region: &str) -> Duration {
        if self.other_region(region) {
            self.settings.wan_delay
        } else {
            Duration::ZERO
        }
    }

    pub(super) async fn run_link(
        self: Arc<Self>,
        link: Arc<Link>,
        mut rx: mpsc::UnboundedReceiver<Out>,
    ) {
        let mut backoff = Duration::from_millis(50);
        loop {
            if link.state.load(Ordering::SeqCst) != LINK_OPEN
                && link
                    .state
                    .compare_exchange(LINK_CLOSING, LINK_ENDED, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                break;
            }
            if self.links_down() {
                // As a connection attempt that failed.
                link.unreachable.store(true, Ordering::Relaxed);
            } else if !self.cut(&link.region) {
                let conn =
                    tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(link.addr))
                        .await;
                if let Ok(Ok(stream)) = conn {
                    let _ = stream.set_nodelay(true);
                    match crate::peer_auth::client_handshake(
                        stream,
                        self.settings.auth.as_deref(),
                        &self.my_hello(),
                    )
                    .await
                    {
                        Ok(authed) => {
                            backoff = Duration::from_millis(50);
                            link.unreachable.store(false, Ordering::Relaxed);
                            link.connected.store(true, Ordering::Relaxed);
                            self.serve_link(&link, authed, &mut rx).await;
                            link.connected.store(false, Ordering::Relaxed);
                        }
                        Err(e) => {
                            // Not one of ours (another secret, or none):
                            // as good as down, and worth a line in the log.
                            link.unreachable.store(true, Ordering::Relaxed);
                            self.frames_refused.fetch_add(1, Ordering::Relaxed);
                            if self.log_budget() {
                                tracing::warn!("peer {} at {}: refused: {e}", link.node, link.addr);
                            }
                        }
                    }
                } else {
                    link.unreachable.store(true, Ordering::Relaxed);
                }
            }
            // Whatever was waiting fails now: callers see the shard as
            // gone, gossip is left to anti-entropy. The queue first: a
            // request queued after this drain keeps its answer slot and is
            // sent on the next connection.
            while rx.try_recv().is_ok() {
                link.queued.fetch_sub(1, Ordering::Relaxed);
            }
            link.fail_pending();
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
        // Ended: what is still awaited on it fails now, and the next frame
        // for the node (back, or never gone) makes a new link.
        {
            let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
            if links.get(&link.node).is_some_and(|l| Arc::ptr_eq(l, &link)) {
                links.remove(&link.node);
            }
        }
        link.fail_pending();
    }

    /// This node's first frame on a connection.
    fn my_hello(&self) -> wire::Hello {
        wire::Hello {
            node: self.settings.node,
            region: self.settings.region.clone(),
            ..Default::default()
        }
    }

    pub(super) async fn serve_link(
        self: &Arc<Self>,
        link: &Link,
        authed: crate::peer_auth::Authed,
        rx: &mut mpsc::UnboundedReceiver<Out>,
    ) {
        let (mut rd, mut wr) = tokio::io::split(authed.io);
        let first = authed.buf;
        let delay = self.delay_for(&link.region);
        let writer = async {
            let mut buf = BytesMut::new();
            while let Some(out) = rx.recv().await {
                link.queued.fetch_sub(1, Ordering::Relaxed);
                if !delay.is_zero() {
                    tokio::time::sleep_until((out.at + delay).into()).await;
                }
                buf.clear();
                out.frame.encode_to(&mut buf);
                // Batch whatever else is already due.
                while buf.len() < 1 << 20 {
                    let Ok(o) = rx.try_recv() else { break };
                    link.queued.fetch_sub(1, Ordering::Relaxed);
                    if !delay.is_zero() && o.at + delay > Instant::now() {
                        if write_out(&mut wr, &buf).await.is_err() {
                            return;
                        }
                        buf.clear();
                        tokio::time::sleep_until((o.at + delay).into()).await;
                    }
                    o.frame.encode_to(&mut buf);
                }
                // A cut or a hiccup bites at once, not at the next poll:
                // nothing leaves after `LINKS-DOWN` has returned.
                if self.cut(&link.region)
                    || self.links_down()
                    || write_out(&mut wr, &buf).await.is_err()
                {
                    return;
                }
                buf.clear();
                shed(&mut buf);
            }
        };
        let reader = async {
            let mut buf = first;
            buf.reserve(64 * 1024);
            loop {
                match wire::decode_frame(&mut buf) {
                    Ok(Some(frame)) => {
                        if self.cut(&link.region) || self.links_down() {
                            return;
                        }
                        if let Err(why) = self.check_frame(&frame) {
                            self.note_refused(&link.addr.to_string(), &why);
                            continue;
                        }
                        self.on_link_frame(link, frame);
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!("peer {}: {e}; reconnecting", link.node);
                        return;
                    }
                }
                shed(&mut buf);
                match rd.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        // Fault injection only: the connection drops when its links go
        // down (`ELSA.FAULT LINKS-DOWN`).
        let hiccup = async {
            while !self.links_down() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            _ = writer => {}
            _ = reader => {}
            _ = hiccup, if self.settings.fault_injection => {}
        }
    }

    /// Answers coming back on a link we opened.
    pub(super) fn on_link_frame(self: &Arc<Self>, link: &Link, frame: Frame) {
        self.heard_from(link.node);
        let Some(body) = frame.body else { return };
        match body {
            Body::Response(r) => {
                // Checked by `check_frame`.
                self.hlc.observe(r.hlc);
                if r.not_serving {
                    self.note_not_serving(link.node);
                }
                let done = link
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&r.id);
                if let (Some((_, done)), Ok(answer)) = (done, Answer::decode(r.answer)) {
                    match self.check_answer(&answer) {
                        Ok(()) => done(answer),
                        // Dropped: the caller sees the shard as gone.
                        Err(why) => self.note_refused(&link.addr.to_string(), &why),
                    }
                }
            }
            Body::GossipAck(a) => {
                self.stream_acked(link.node, &a);
                let mut acked = self.acked.lock().unwrap_or_else(|e| e.into_inner());
                acked
                    .entry((a.from_shard as u16, link.node))
                    .or_insert_with(|| Stream::after_boot(self.boot_ts))
                    .acked(a.flushed_ts);
            }
            Body::AeBuckets(b) => {
                // Before anything of the round: a node that missed a flush
                // ships and takes nothing it covers.
                self.on_floors(b.floors.as_ref());
                self.on_functions_digest(link.node, b.functions);
                self.ae_compare(link.node, b)
            }
            Body::ReplicateAck(a) => self.on_replicate_ack(link.node, a),
            Body::AeEntries(e) => {
                let received: Vec<u64> = e.lattices.iter().map(|l| l.commit_ts).collect();
                let arrival = self.arrival(&link.region, Arrival::Repair);
                let merges = self
                    .merge_split(link.node, e.lattices, &e.unvouched, Some(()), arrival)
                    .map(|(mut waits, behind)| {
                        waits.extend(behind);
                        waits
                    });
                if let Some(merges) = merges {
                    let theirs = (e.proof && !e.capped).then(|| e.held.clone());
                    let (me, node) = (self.clone(), link.node);
                    self.handle.spawn(async move {
                        // Whether what the peer sent changed nothing here.
                        let mut absorbed = true;
                        for rx in merges {
                            absorbed &= matches!(rx.await, Ok(Ok(0)));
                        }
                        let seen = super::rounds::Seen {
                            received: &received,
                            absorbed,
                            dominated: e.dominated,
                            capped: e.capped,
                        };
                        me.ae_finish(node, e.round, seen, theirs.as_deref());
                    });
                }
            }
            Body::WatermarkReply(w) => {
                if let Some(tx) = self
                    .waits
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&w.id)
                {
                    let _ = tx.send(w.ts);
                }
            }
            _ => {}
        }
    }

    pub(super) async fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        loop {
            match listener.accept().await {
                Ok((stream, from)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(self.clone().serve_peer(stream, from));
                }
                Err(e) => {
                    tracing::warn!("peer accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// A connection a peer opened: its requests, gossip and anti-entropy.
    /// Nothing it sends is read past its Hello until it has proved it holds
    /// the cluster secret (with one configured; `peer_auth`).
    pub(super) async fn serve_peer(self: Arc<Self>, stream: TcpStream, from: SocketAddr) {
        let authed = match crate::peer_auth::server_handshake(
            stream,
            self.settings.auth.as_deref(),
            &self.my_hello(),
        )
        .await
        {
            Ok(a) => a,
            Err(e) => {
                self.frames_refused.fetch_add(1, Ordering::Relaxed);
                if self.log_budget() {
                    tracing::warn!("peer connection from {from}: refused: {e}");
                }
                return;
            }
        };
        let hello = authed.hello;
        let mut buf = authed.buf;
        let (mut rd, mut wr) = tokio::io::split(authed.io);
        if self.cut(&hello.region) {
            return;
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<Out>();
        let delay = self.delay_for(&hello.region);
        let region = hello.region.clone();
        let me = self.clone();
        let writer = tokio::spawn(async move {
            let mut out_buf = BytesMut::new();
            while let Some(out) = rx.recv().await {
                if !delay.is_zero() {
                    tokio::time::sleep_until((out.at + delay).into()).await;
                }
                out_buf.clear();
                out.frame.encode_to(&mut out_buf);
                while let Ok(o) = rx.try_recv() {
                    if !delay.is_zero() {
                        tokio::time::sleep_until((o.at + delay).into()).await;
                    }
                    o.frame.encode_to(&mut out_buf);
                    if out_buf.len() > 1 << 20 {
                        break;
                    }
                }
                if me.cut(&region) || write_out(&mut wr, &out_buf).await.is_err() {
                    return;
                }
                out_buf.clear();
                shed(&mut out_buf);
            }
        });
        // Holds taken for coordinators on that node stay if the connection
        // dies: their transaction may be decided already. Holds whose
        // coordinator stays silent are resolved from the transaction's
        // record (`elsa_txn::record`).
        'conn: loop {
            loop {
                match wire::decode_frame(&mut buf) {
                    Ok(Some(frame)) => {
                        if self.cut(&hello.region) {
                            break 'conn;
                        }
                        if let Err(why) = self.check_frame(&frame) {
                            self.note_refused(&format!("{} at {from}", hello.node), &why);
                            continue;
                        }
                        self.on_peer_frame(&hello, frame, &tx);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!("peer {}: {e}; closing", hello.node);
                        break 'conn;
                    }
                }
            }
            shed(&mut buf);
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        writer.abort();
    }

    pub(super) fn on_peer_frame(
        self: &Arc<Self>,
        hello: &wire::Hello,
        frame: Frame,
        tx: &mpsc::UnboundedSender<Out>,
    ) {
        self.heard_from(hello.node);
        let Some(body) = frame.body else { return };
        let reply = |body: Body| {
            let _ = tx.send(Out {
                frame: Frame::new(body),
                at: Instant::now(),
            });
        };
        match body {
            Body::Request(req) => {
                let Ok(call) = Call::decode(req.call) else {
                    return;
                };
                if let Err(why) = self.check_call(&call) {
                    // No answer: the caller's request times out as if
                    // this node were gone.
                    self.note_refused(&hello.node.to_string(), &why);
                    return;
                }
                // Checked by `check_frame`.
                self.hlc.observe(req.hlc);
                if call.kind == ownership::OWNERS {
                    self.answer_owners(req.id, call, tx);
                    return;
                }
                if call.kind == 9 {
                    // A synchronous-replication push (2pc mode).
                    let entries = call.entries;
                    let me = self.clone();
                    let tx = tx.clone();
                    self.handle.spawn(async move {
                        me.merge_lattices(entries, None, Arrival::Direct);
                        // Durable before the answer: merge_lattices' acks.
                        let answer = Answer::default().encode_to_vec().into();
                        let _ = tx.send(Out {
                            frame: Frame::new(Body::Response(wire::Response {
                                id: req.id,
                                hlc: me.hlc.peek(),
                                answer,
                                not_serving: false,
                            })),
                            at: Instant::now(),
                        });
                    });
                    return;
                }
                let Some(inbox) = self.inboxes.get(req.shard as usize) else {
                    return;
                };
                // New work for a key (not the follow-ups of a prepare,
                // which must reach the shard that holds its keys).
                if call.kind == 6 && self.drop_installs.load(Ordering::Relaxed) {
                    return; // fault injection: as if this node died here
                }
                if call.kind == 6 && self.busy_installs.load(Ordering::Relaxed) {
                    reply(Body::Response(wire::Response {
                        id: req.id,
                        hlc: self.hlc.peek(),
                        answer: busy_answer(call.kind).encode_to_vec().into(),
                        not_serving: false,
                    }));
                    return;
                }
                if !call.follows_holds() && !self.serves(&call, req.shard) {
                    reply(Body::Response(wire::Response {
                        id: req.id,
                        hlc: self.hlc.peek(),
                        answer: busy_answer(call.kind).encode_to_vec().into(),
                        // Catching up (not merely waiting for a
                        // hand-back, when callers must keep asking).
                        not_serving: !self.is_ready(),
                    }));
                    return;
                }
                // Run before a pause and answered after it, a prepare's
                // validation or a read is stale: the keys may have been
                // served elsewhere meanwhile. (A coordinator stamped its
                // commit after the pause on a validation made before it;
                // installed on the paused node, that newer version later
                // overwrote six appends the node that took over had
                // acknowledged: the long isolation run.) Such an answer
                // becomes Busy, and the caller routes again.
                let lapse = self.hlc.lapse();
                let kind = call.kind;
                let judged = call.answers_from_state();
                let Ok(started) = remote::start(call, inbox) else {
                    return; // malformed or gone: the caller's request fails
                };
                let tx = tx.clone();
                let hlc = self.hlc.clone();
                let me = self.clone();
                self.handle.spawn(async move {
                    if let Ok(Some(answer)) = remote::finish(started).await {
                        if let Some(d) = me.answer_delay(kind) {
                            tokio::time::sleep(d).await;
                        }
                        let answer = if judged && (hlc.lapse() != lapse || !me.is_serving()) {
                            busy_answer(kind)
                        } else {
                            answer
                        };
                        let _ = tx.send(Out {
                            frame: Frame::new(Body::Response(wire::Response {
                                id: req.id,
                                hlc: hlc.peek(),
                                answer: answer.encode_to_vec().into(),
                                not_serving: false,
                            })),
                            at: Instant::now(),
                        });
                    }
                });
            }
            // What a peer this node counts as dead or stale sends is not
            // merged, by any path (see `Cluster::distrusts`); its pulls are
            // still answered, so it can catch up.
            Body::Gossip(g) => {
                // Checked by `check_frame`, with every lattice.
                if self.distrusts(hello.node) || self.fenced_here(hello.node) {
                    return;
                }
                self.hlc.observe(g.flushed_ts);
                self.first_gossip
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(hello.node)
                    .or_insert(g.flushed_ts);
                // Another region's stream: merged in order (`streams`).
                let numbered = g.seq > 0;
                if numbered && self.stream_take(hello.node, &g) == inbox::Take::Early {
                    return;
                }
                self.note_received(hello.node, &g.lattices);
                let arrival = self.arrival(
                    &hello.region,
                    if g.resent {
                        Arrival::Resent
                    } else {
                        Arrival::Gossip
                    },
                );
                let (from_shard, seq) = (g.from_shard, g.seq);
                let Some(done) = self.merge_from(hello.node, g.lattices, Some(()), arrival) else {
                    if numbered {
                        self.stream_untake(hello.node, from_shard, seq);
                    }
                    return;
                };
                let tx = tx.clone();
                let ack = wire::GossipAck {
                    from_shard: g.from_shard,
                    flushed_ts: g.flushed_ts,
                    after_gap: g.after_gap,
                    seq: g.seq,
                    boot: g.boot,
                };
                let me = self.clone();
                let node = hello.node;
                self.handle.spawn(async move {
                    for rx in done {
                        if !matches!(rx.await, Ok(Ok(_))) {
                            // Not durable: no ack, the watermark waits (and
                            // the frame is awaited again).
                            if numbered {
                                me.stream_untake(node, from_shard, seq);
                            }
                            return;
                        }
                    }
                    if numbered {
                        me.stream_merged(node, &ack);
                    }
                    let _ = tx.send(Out {
                        frame: Frame::new(Body::GossipAck(ack)),
                        at: Instant::now(),
                    });
                });
            }
            Body::AeGroups(g) => {
                self.on_functions_digest(hello.node, g.functions);
                // Behind on gossip to it: the stream goes first (`streams`).
                if self.stream_behind(hello.node) {
                    self.note_ae_waited(hello.node);
                    return;
                }
                // Applied before this round's digest is taken (see
                // `floors`).
                self.on_floors(g.floors.as_ref());
                let me = self.clone();
                let tx = tx.clone();
                let peer = hello.node;
                self.handle.spawn(async move {
                    let Some(shared) = me.shared_with(peer) else {
                        return;
                    };
                    // Before the digest: what the fenced nodes sent is in
                    // it, or refused from now on.
                    me.fence(&g.fence);
                    let floors = me.node_floors().await;
                    let digest = me.node_digest().await;
                    let mine = ae::group_digests(&digest, &shared);
                    let groups = ae::differing_groups(&mine, &g.groups, &g.digests);
                    let (buckets, digests) = ae::bucket_digests(&digest, &shared, &groups);
                    let _ = tx.send(Out {
                        frame: Frame::new(Body::AeBuckets(wire::AeBuckets {
                            round: g.round,
                            buckets,
                            digests,
                            floors,
                            functions: me.functions_digest(),
                        })),
                        at: Instant::now(),
                    });
                });
            }
            Body::AeEntries(e) => {
                let arrival = self.arrival(&hello.region, Arrival::Repair);
                // The answer's proof tells the initiator this node merged
                // what it shipped (its tombstones may then go: `proofs`);
                // shipped by a node this one distrusts or fences, nothing
                // was merged, so the answer proves nothing.
                let peer = hello.node;
                let merges = self.merge_split(peer, e.lattices, &e.unvouched, Some(()), arrival);
                let mut merged = merges.is_some();
                if !e.pull.is_empty() {
                    let me = self.clone();
                    let tx = tx.clone();
                    self.handle.spawn(async move {
                        // Whether the initiator's lattices changed anything
                        // here (each shard answers how many it installed).
                        let mut dominated = merged;
                        let (waits, behind) = merges.unwrap_or_default();
                        for rx in waits {
                            dominated &= matches!(rx.await, Ok(Ok(0)));
                        }
                        // Another region's backup's lattices that would
                        // change something wait for their primary
                        // (`units`): not merged, so nothing is proven.
                        for rx in behind {
                            let nothing = matches!(rx.await, Ok(Ok(0)));
                            dominated &= nothing;
                            merged &= nothing;
                        }
                        let cutoff = if e.full { u64::MAX } else { me.cutoff() };
                        let out = me.bucket_lattices(&e.pull, cutoff, &e.whole).await;
                        let unvouched = me.unvouched(peer, &out.lattices);
                        let _ = tx.send(Out {
                            frame: Frame::new(Body::AeEntries(wire::AeEntries {
                                round: e.round,
                                unvouched,
                                lattices: out.lattices,
                                pull: Vec::new(),
                                full: false,
                                whole: Vec::new(),
                                held: out.held,
                                proof: merged,
                                capped: out.capped,
                                dominated,
                            })),
                            at: Instant::now(),
                        });
                    });
                }
            }
            Body::HandBackAsk(_) => self.hand_back(hello.node),
            Body::Replicate(r) => self.on_replicate(hello.node, r, tx),
            Body::HandBack(h) => {
                self.hold_for_handed_back(hello.node, h.holds);
                self.handed_back
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(hello.node);
            }
            Body::Publish(p) => self.on_published(&hello.region, p),
            Body::Flush(f) => self.on_floors(Some(&f)),
            Body::Functions(f) => self.on_functions(&f),
            Body::WatermarkQuery(q) => {
                let ts = self.watermark(&q.region);
                reply(Body::WatermarkReply(wire::WatermarkReply { id: q.id, ts }));
            }
            _ => {}
        }
    }
}

/// Gives back a link buffer that a burst grew past [`SHED_ABOVE`] once it
/// holds nothing: a load of 200k keys left ~45 MB of read and write
/// buffers on each node of a quiet cluster (`bench/memory-cluster.sh`).
fn shed(buf: &mut BytesMut) {
    if buf.is_empty() && buf.capacity() > SHED_ABOVE {
        *buf = BytesMut::with_capacity(64 * 1024);
    }
}

/// A link buffer larger than this is given back once empty.
const SHED_ABOVE: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_buffer_a_burst_grew_is_given_back_once_empty() {
        let mut buf = BytesMut::with_capacity(8 << 20);
        buf.extend_from_slice(b"a frame not read whole yet");
        shed(&mut buf);
        assert!(buf.capacity() > SHED_ABOVE, "kept while it holds bytes");
        buf.clear();
        shed(&mut buf);
        assert!(buf.capacity() <= SHED_ABOVE, "{}", buf.capacity());
        let mut small = BytesMut::with_capacity(64 * 1024);
        shed(&mut small);
        assert_eq!(small.capacity(), 64 * 1024);
    }
}
