//! lmstfy's Rust client, the crate lmstfy-client 0.1.0 as published, run
//! against the lmstfy-compatible server at LMSTFY_URL (http://host:port) in
//! the namespace LMSTFY_NAMESPACE with the token LMSTFY_TOKEN. Every public
//! method of the crate's `Client` is called and its answer checked as
//! lmstfy's semantics say. Each check prints `ok <name>` or
//! `FAIL <name>: <why>`; lines starting with `#` are notes. LMSTFY_KNOWN
//! names checks (comma-separated) that fail on the server for a difference
//! from lmstfy known to its tests: such a check prints `known <name>:
//! <why>` when it fails, and fails when it passes, for the list to lose it.
//! The program exits 1 if a check failed, 2 if it could not start.
//!
//! What the crate can see of lmstfy's answers bounds the checks:
//! - Its `Job` wants `id`, `elapsed` and `data` as an array of numbers,
//!   where lmstfy answers `job_id`, `elapsed_ms` and `data` in base64. No
//!   job that lmstfy hands out or shows decodes: consume, batch_consume,
//!   consume_from_queues, peek_queue and peek_job return serde's error,
//!   which quotes the (first) job's data. A 404 (no job) is `Ok` and empty.
//!   The checks read a job's data from that error, or from the job when
//!   the crate decodes one, and match jobs by their data: the crate never
//!   shows a consumed job's ID.
//! - queue_size asks for `{queue}/{queue}/size`, a route lmstfy does not
//!   have: lmstfy answers 404, which the crate returns as an error.
//! - peek_dead_letter wants `size` and `header` where lmstfy answers
//!   `deadletter_size` and `deadletter_head`: always an error.
//! - publish decodes the body before it looks at the status: a refused
//!   publish is an error that names the missing `job_id`.
//! Where the crate sees nothing of the semantics (queue_size,
//! peek_dead_letter), the check wants lmstfy's answer as the crate reports
//! it. The crate has no call for deleting dead letters; `retry` and
//! `backoff` of `Client::new` are kept and never used.
//!
//! The checks run at once, each on queues of its own named after the run,
//! so a server's earlier runs do not meet this one. Every call is bounded
//! (CALL_BOUND past its own long poll); waits poll a condition with a
//! deadline, and sleep only where a delay or a ttr is under test. The
//! crate itself prints `url = ...` and `got response` for each request.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::{FutureExt, LocalBoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use lmstfy_client::api::{Client, Job};
use lmstfy_client::errors::{APIError, ErrType};

type Check = Result<(), String>;

/// CALL_BOUND bounds a call past the long poll it asks for.
const CALL_BOUND: Duration = Duration::from_secs(60);
/// WAIT bounds a condition waited for: a ttr's end, a retry's backoff, a
/// ttl's end.
const WAIT: Duration = Duration::from_secs(30);
/// TTL_WAIT bounds the end of a job of ttl 1 s: lmstfy's is Redis's
/// expiry of its key, at once.
const TTL_WAIT: Duration = Duration::from_secs(10);
/// POLL is the pause between two looks at a condition.
const POLL: Duration = Duration::from_millis(200);

/// Jobs the crate decoded, and jobs seen only in its decode error.
static DECODED: AtomicUsize = AtomicUsize::new(0);
static UNDECODABLE: AtomicUsize = AtomicUsize::new(0);

struct T {
    c: Client,
    run: String,
}

impl T {
    /// q is the queue name of this run for name.
    fn q(&self, name: &str) -> String {
        format!("{}-{}", self.run, name)
    }

    /// data is the data of job name of this run.
    fn data(&self, name: &str) -> Vec<u8> {
        format!("{}/{}", self.run, name).into_bytes()
    }

    async fn publish(&self, q: &str, data: &[u8], ttl: u32, tries: u32, delay: u32) -> Result<String, String> {
        let (id, request_id) = bounded(
            "publish",
            0,
            self.c
                .publish(q.to_string(), String::new(), data.to_vec(), ttl, tries, delay),
        )
        .await?
        .map_err(|e| format!("publish to {}: {}", q, e))?;
        if id.is_empty() {
            return Err(format!("publish to {}: no job_id", q));
        }
        if request_id.is_empty() {
            return Err(format!("publish to {}: no X-Request-ID", q));
        }
        Ok(id)
    }

    /// consume is the data of the job a consume got (None: it answered 404).
    async fn consume(&self, q: &str, ttr: u32, timeout: u32) -> Result<Option<Vec<u8>>, String> {
        let r = bounded("consume", timeout, self.c.consume(q.to_string(), ttr, timeout)).await?;
        first_job(&format!("consume of {}", q), r)
    }

    async fn peek_job(&self, q: &str, id: &str) -> Result<Option<Vec<u8>>, String> {
        let r = bounded("peek_job", 0, self.c.peek_job(q.to_string(), id.to_string())).await?;
        peeked(&format!("peek_job {} of {}", id, q), r)
    }

    async fn ack(&self, q: &str, id: &str) -> Check {
        bounded("ack", 0, self.c.ack(q.to_string(), id.to_string()))
            .await?
            .map_err(|e| format!("ack of {} in {}: {}", id, q, e))
    }

    async fn respawn(&self, q: &str, limit: i64) -> Result<u32, String> {
        bounded(
            "respawn_dead_letter",
            0,
            self.c.respawn_dead_letter(q.to_string(), limit, 60),
        )
        .await?
        .map_err(|e| format!("respawn_dead_letter of {}: {}", q, e))
    }

    /// respawned waits for want dead letters of q and respawns them,
    /// limit at a time; it fails if an answer counts more than limit.
    async fn respawned(&self, q: &str, limit: i64, want: u32) -> Check {
        let deadline = Instant::now() + WAIT;
        let mut got = 0;
        loop {
            let n = self.respawn(q, limit).await?;
            if n as i64 > limit {
                return Err(format!(
                    "respawn_dead_letter of {} with limit {} respawned {}",
                    q, limit, n
                ));
            }
            got += n;
            if got >= want {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} of {} jobs in the dead letters of {} within {:?}",
                    got, want, q, WAIT
                ));
            }
            tokio::time::delay_for(POLL).await;
        }
        if got != want {
            return Err(format!("respawned {} dead letters of {}, want {}", got, q, want));
        }
        Ok(())
    }
}

/// bounded runs a call that long-polls for up to timeout seconds, and
/// fails it past that and CALL_BOUND.
async fn bounded<F: Future>(what: &str, timeout: u32, f: F) -> Result<F::Output, String> {
    let bound = Duration::from_secs(timeout as u64) + CALL_BOUND;
    tokio::time::timeout(bound, f)
        .await
        .map_err(|_| format!("{}: no answer within {:?}", what, bound))
}

/// first_job is the data of the first job of a consume's answer, decoded
/// by the crate or read from its error (see the top of the file).
fn first_job(what: &str, r: Result<Vec<Job>, APIError>) -> Result<Option<Vec<u8>>, String> {
    match r {
        Ok(jobs) => match jobs.into_iter().next() {
            None => Ok(None),
            Some(job) => {
                DECODED.fetch_add(1, Ordering::Relaxed);
                Ok(Some(job.data))
            }
        },
        Err(e) => undecodable(what, &e),
    }
}

fn peeked(what: &str, r: Result<Option<Job>, APIError>) -> Result<Option<Vec<u8>>, String> {
    first_job(what, r.map(|j| j.into_iter().collect()))
}

/// undecodable reads the data of a job the crate could not decode from
/// serde's error: `invalid type: string "<base64>", expected a sequence`
/// (or `null` for none).
fn undecodable(what: &str, e: &APIError) -> Result<Option<Vec<u8>>, String> {
    const STR: &str = "invalid type: string \"";
    let fail = || Err(format!("{}: {}", what, e));
    if e.err_type != ErrType::ResponseErr || !e.reason.contains("expected a sequence") {
        return fail();
    }
    if e.reason.contains("invalid type: null") {
        UNDECODABLE.fetch_add(1, Ordering::Relaxed);
        return Ok(Some(Vec::new()));
    }
    let start = match e.reason.find(STR) {
        Some(i) => i + STR.len(),
        None => return fail(),
    };
    let end = match e.reason[start..].find('"') {
        Some(i) => start + i,
        None => return fail(),
    };
    match base64::decode(&e.reason[start..end]) {
        Ok(data) => {
            UNDECODABLE.fetch_add(1, Ordering::Relaxed);
            Ok(Some(data))
        }
        Err(_) => fail(),
    }
}

fn show(data: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(data))
}

fn want_job(what: &str, got: Option<Vec<u8>>, want: &[u8]) -> Check {
    match got {
        Some(data) if data == want => Ok(()),
        Some(data) => Err(format!("{}: got the job {}, want {}", what, show(&data), show(want))),
        None => Err(format!("{}: no job (404), want {}", what, show(want))),
    }
}

fn want_none(what: &str, got: Option<Vec<u8>>) -> Check {
    match got {
        None => Ok(()),
        Some(data) => Err(format!("{}: got the job {}, want none (404)", what, show(&data))),
    }
}

// The checks, in the order of the crate's methods.

/// Client-side refusals: the crate checks these before any request.
async fn client_refusals(t: &T) -> Check {
    let q = t.q("refusals");
    let mut errs = vec![
        ("consume ttr 0", t.c.consume(q.clone(), 0, 0).await.err()),
        ("consume timeout 600", t.c.consume(q.clone(), 30, 600).await.err()),
        (
            "batch_consume count 0",
            t.c.batch_consume(q.clone(), 30, 0, 0).await.err(),
        ),
        (
            "batch_consume count 101",
            t.c.batch_consume(q.clone(), 30, 0, 101).await.err(),
        ),
        (
            "consume_from_queues ttr 0",
            t.c.consume_from_queues(vec![q.clone()], 0, 0).await.err(),
        ),
        (
            "respawn_dead_letter limit 0",
            t.c.respawn_dead_letter(q.clone(), 0, 60).await.err(),
        ),
        (
            "respawn_dead_letter ttl 0",
            t.c.respawn_dead_letter(q.clone(), 1, 0).await.err(),
        ),
    ];
    for (what, e) in errs.drain(..) {
        match e {
            Some(e) if e.err_type == ErrType::RequestErr => {}
            Some(e) => return Err(format!("{}: {}, want the crate's refusal", what, e)),
            None => return Err(format!("{}: accepted, want the crate's refusal", what)),
        }
    }
    Ok(())
}

/// publish: a job ID and a request ID; the data, any bytes, round-trip.
async fn publish(t: &T) -> Check {
    let q = t.q("publish");
    let mut data = t.data("publish");
    data.extend_from_slice(b" \x00\x01\xfe\xff \xe2\x9c\x93");
    let id = t.publish(&q, &data, 0, 1, 0).await?;
    want_job("peek_job of the job published", t.peek_job(&q, &id).await?, &data)?;
    want_job("consume", t.consume(&q, 30, 3).await?, &data)?;
    t.ack(&q, &id).await
}

/// publish-refused: tries 0, and a ttl shorter than the delay, are
/// refused (lmstfy: 400), which the crate reports as a body without
/// `job_id`.
async fn publish_refused(t: &T) -> Check {
    let q = t.q("refused");
    for (what, ttl, tries, delay) in [("tries 0", 0, 0, 0), ("ttl 1 delay 2", 1, 1, 2)].iter() {
        match bounded(
            "publish",
            0,
            t.c.publish(q.clone(), String::new(), t.data(what), *ttl, *tries, *delay),
        )
        .await?
        {
            Ok((id, _)) => {
                return Err(format!(
                    "publish with {}: accepted as {}, want refused (lmstfy: 400)",
                    what, id
                ))
            }
            Err(e) if e.err_type == ErrType::RequestErr && e.reason.contains("missing field `job_id`") => {}
            Err(e) => {
                return Err(format!(
                    "publish with {}: {}, want lmstfy's 400 (an error without job_id)",
                    what, e
                ))
            }
        }
    }
    want_none("consume after the refused publishes", t.consume(&q, 30, 1).await?)
}

/// publish-delay: a job is not consumable before its delay and is after
/// it; lmstfy counts a delay in whole seconds, so it may come up to a
/// second early by the clock.
async fn publish_delay(t: &T) -> Check {
    let q = t.q("delay");
    let data = t.data("delay");
    let start = Instant::now();
    let id = t.publish(&q, &data, 0, 1, 2).await?;
    // Its delay counts from the server's receipt of the publish, after
    // start: a publish that took a second or more (a new queue's topics
    // made on Kafka) leaves it due within the first consume's wait.
    let mut got = t.consume(&q, 30, 1).await?;
    if got.is_none() {
        want_job("peek_job of the delayed job", t.peek_job(&q, &id).await?, &data)?;
        got = t.consume(&q, 30, 10).await?;
    }
    want_job("consume of the delayed job", got, &data)?;
    let waited = start.elapsed();
    if waited < Duration::from_secs(1) {
        return Err(format!(
            "the job delayed 2 s was handed out {:?} after its publish was sent: early",
            waited
        ));
    }
    println!(
        "# publish-delay: a job delayed 2 s handed out {:.1} s after its publish",
        waited.as_secs_f64()
    );
    t.ack(&q, &id).await
}

/// publish-ttl: a job whose ttl passed is gone: peek_job and consume find
/// none.
async fn publish_ttl(t: &T) -> Check {
    let q = t.q("ttl");
    let id = t.publish(&q, &t.data("ttl"), 1, 1, 0).await?;
    let deadline = Instant::now() + TTL_WAIT;
    while t.peek_job(&q, &id).await?.is_some() {
        if Instant::now() > deadline {
            return Err(format!(
                "peek_job still finds a job of ttl 1 s {:?} after its publish (lmstfy: 404 once the ttl passed)",
                TTL_WAIT
            ));
        }
        tokio::time::delay_for(POLL).await;
    }
    want_none("consume of a job past its ttl", t.consume(&q, 30, 1).await?)
}

/// publish-ack: publish with ack_job_id acknowledges (deletes) that job
/// and publishes a new one.
async fn publish_ack(t: &T) -> Check {
    let q = t.q("republish");
    let (first, second) = (t.data("first"), t.data("second"));
    let id1 = t.publish(&q, &first, 0, 2, 0).await?;
    want_job("consume", t.consume(&q, 30, 3).await?, &first)?;
    let (id2, _) = bounded(
        "publish",
        0,
        t.c.publish(q.clone(), id1.clone(), second.clone(), 0, 1, 0),
    )
    .await?
    .map_err(|e| format!("publish with ack_job_id {}: {}", id1, e))?;
    if id2.is_empty() || id2 == id1 {
        return Err(format!(
            "publish with ack_job_id {}: job_id {:?}, want a new one",
            id1, id2
        ));
    }
    want_none(
        "peek_job of the job acknowledged by a publish",
        t.peek_job(&q, &id1).await?,
    )?;
    want_job(
        "consume of the job published with ack_job_id",
        t.consume(&q, 30, 3).await?,
        &second,
    )?;
    t.ack(&q, &id2).await?;
    want_none("consume after both jobs were acknowledged", t.consume(&q, 30, 1).await?)
}

/// consume-empty: a consume of an empty queue without a timeout answers
/// at once: no job.
async fn consume_empty(t: &T) -> Check {
    let start = Instant::now();
    want_none(
        "consume (timeout 0) of an empty queue",
        t.consume(&t.q("empty"), 30, 0).await?,
    )?;
    if start.elapsed() > Duration::from_secs(5) {
        return Err(format!(
            "consume (timeout 0) of an empty queue took {:?}",
            start.elapsed()
        ));
    }
    Ok(())
}

/// consume-timeout: a consume of an empty queue waits its timeout.
async fn consume_timeout(t: &T) -> Check {
    let start = Instant::now();
    want_none(
        "consume (timeout 2 s) of an empty queue",
        t.consume(&t.q("timeout"), 30, 2).await?,
    )?;
    if start.elapsed() < Duration::from_millis(1900) {
        return Err(format!(
            "consume (timeout 2 s) of an empty queue answered after {:?}",
            start.elapsed()
        ));
    }
    Ok(())
}

/// consume-long-poll: a consume waiting on an empty queue gets the job
/// published while it waits, before its timeout.
async fn consume_long_poll(t: &T) -> Check {
    let q = t.q("longpoll");
    let data = t.data("longpoll");
    let start = Instant::now();
    let consume = t.consume(&q, 30, 10);
    let publish = async {
        tokio::time::delay_for(Duration::from_secs(1)).await; // the consume waits meanwhile
        t.publish(&q, &data, 0, 1, 0).await
    };
    let (got, id) = futures::join!(consume, publish);
    let id = id?;
    want_job("consume (timeout 10 s) while a job is published", got?, &data)?;
    if start.elapsed() >= Duration::from_secs(10) {
        return Err(format!(
            "the waiting consume got the job after {:?}, its timeout",
            start.elapsed()
        ));
    }
    t.ack(&q, &id).await
}

/// batch-consume: of 4 jobs, a batch of 3 takes at most 3 and consumes
/// each once; a batch of an empty queue waits its timeout (lmstfy's
/// client_test.go, where a batch takes 3 and leaves 1).
async fn batch_consume(t: &T) -> Check {
    let q = t.q("batch");
    let mut ids = Vec::new();
    let mut want = BTreeSet::new();
    for i in 0..4 {
        let data = t.data(&format!("batch-{}", i));
        ids.push(t.publish(&q, &data, 0, 1, 0).await?);
        want.insert(data);
    }
    let r = bounded("batch_consume", 3, t.c.batch_consume(q.clone(), 30, 3, 3)).await?;
    let batch = match &r {
        Ok(jobs) if jobs.len() > 3 => return Err(format!("batch_consume (count 3) got {} jobs", jobs.len())),
        Ok(jobs) => Some(jobs.len()),
        Err(_) => None, // not decoded: its size is unknown
    };
    match first_job("batch_consume (count 3)", r)? {
        Some(data) if want.remove(&data) => {}
        got => {
            return Err(format!(
                "batch_consume (count 3) of 4 jobs: got {:?}, want one of them",
                got.map(|d| show(&d))
            ))
        }
    }
    // The crate shows the first job of a batch it cannot decode: what is
    // left tells the rest, each job once. lmstfy's batch takes the 3 jobs
    // it has; a server may hand out fewer, those that reached it, and
    // the others a moment later (the queue's first consume wakes it).
    let mut left = 0;
    while let Some(data) = t.consume(&q, 30, 5).await? {
        if !want.contains(&data) {
            return Err(format!(
                "consume after a batch of 4 jobs: got {}, want one not consumed yet",
                show(&data)
            ));
        }
        left += 1;
        if left > 3 {
            return Err("more than 3 jobs left after a batch of 4 jobs took one".to_string());
        }
    }
    if let Some(n) = batch {
        if n + left != 4 {
            return Err(format!("a batch of {} jobs and {} left of 4 jobs", n, left));
        }
    }
    if left != 1 {
        println!("# batch-consume: a batch of 3 of 4 jobs left {} (lmstfy's: 1)", left);
    }
    let start = Instant::now();
    let r = bounded("batch_consume", 2, t.c.batch_consume(q.clone(), 30, 2, 3)).await?;
    want_none(
        "batch_consume (timeout 2 s) of an empty queue",
        first_job("batch_consume", r)?,
    )?;
    if start.elapsed() < Duration::from_millis(1900) {
        return Err(format!(
            "batch_consume (timeout 2 s) of an empty queue answered after {:?}",
            start.elapsed()
        ));
    }
    for id in ids {
        t.ack(&q, &id).await?;
    }
    Ok(())
}

/// consume-from-queues: the first queue named that has a job gives it,
/// then the next; then none, after the timeout.
async fn consume_from_queues(t: &T) -> Check {
    let (q1, q2) = (t.q("multi1"), t.q("multi2"));
    let (d1, d2) = (t.data("multi1"), t.data("multi2"));
    let id1 = t.publish(&q1, &d1, 0, 1, 0).await?;
    let id2 = t.publish(&q2, &d2, 0, 1, 0).await?;
    let queues = vec![q2.clone(), q1.clone()];
    let from = |timeout: u32| {
        let queues = queues.clone();
        async move {
            let r = bounded(
                "consume_from_queues",
                timeout,
                t.c.consume_from_queues(queues, 30, timeout),
            )
            .await?;
            first_job("consume_from_queues", r)
        }
    };
    want_job("consume_from_queues [q2, q1] with a job in each", from(3).await?, &d2)?;
    want_job("consume_from_queues [q2, q1] with a job in q1", from(3).await?, &d1)?;
    let start = Instant::now();
    want_none("consume_from_queues (timeout 1 s) of two empty queues", from(1).await?)?;
    if start.elapsed() < Duration::from_millis(900) {
        return Err(format!(
            "consume_from_queues (timeout 1 s) of empty queues answered after {:?}",
            start.elapsed()
        ));
    }
    t.ack(&q1, &id1).await?;
    t.ack(&q2, &id2).await
}

/// ack: an acknowledged job is gone: not shown, not handed out again past
/// its ttr, not a dead letter.
async fn ack(t: &T) -> Check {
    let q = t.q("ack");
    let data = t.data("ack");
    let id = t.publish(&q, &data, 0, 2, 0).await?;
    want_job("consume (ttr 3 s)", t.consume(&q, 3, 3).await?, &data)?;
    t.ack(&q, &id).await?;
    want_none("peek_job of an acknowledged job", t.peek_job(&q, &id).await?)?;
    want_none(
        "consume (timeout 6 s) past the acknowledged job's ttr",
        t.consume(&q, 30, 6).await?,
    )?;
    match t.respawn(&q, 10).await? {
        0 => Ok(()),
        n => Err(format!("respawn_dead_letter after the ack respawned {}, want 0", n)),
    }
}

/// ack-pending: an ack of a job not handed out deletes it.
async fn ack_pending(t: &T) -> Check {
    let q = t.q("ackpending");
    let id = t.publish(&q, &t.data("ackpending"), 0, 1, 0).await?;
    t.ack(&q, &id).await?;
    want_none(
        "consume of a job acknowledged before it was handed out",
        t.consume(&q, 30, 1).await?,
    )?;
    want_none(
        "peek_job of a job acknowledged before it was handed out",
        t.peek_job(&q, &id).await?,
    )
}

/// ack-unknown: an ack of a job the queue never had answers 204, as
/// lmstfy's does.
async fn ack_unknown(t: &T) -> Check {
    t.ack(&t.q("ackunknown"), "01M8NX28J1YFSKD7Y7ER000001").await
}

/// queue-size: the crate asks for {queue}/{queue}/size, which lmstfy
/// does not route: 404, an error.
async fn queue_size(t: &T) -> Check {
    let q = t.q("size");
    let (a, b) = (
        t.publish(&q, &t.data("size-a"), 0, 1, 0).await?,
        t.publish(&q, &t.data("size-b"), 0, 1, 0).await?,
    );
    match bounded("queue_size", 0, t.c.queue_size(q.clone())).await? {
        Err(e) if e.err_type == ErrType::ResponseErr && e.reason == "Not Found" => {}
        Err(e) => {
            return Err(format!(
                "queue_size of a queue of 2 jobs: {}; lmstfy answers the crate's path 404",
                e
            ))
        }
        Ok(n) => {
            return Err(format!(
                "queue_size of a queue of 2 jobs: {}; lmstfy answers the crate's path ({}/{}/size) 404",
                n, q, q
            ))
        }
    }
    t.ack(&q, &a).await?;
    t.ack(&q, &b).await
}

/// peek-queue: no job in an empty queue; the job that waits the longest,
/// left in the queue.
async fn peek_queue(t: &T) -> Check {
    let q = t.q("peekqueue");
    let peek = || async {
        let r = bounded("peek_queue", 0, t.c.peek_queue(q.clone())).await?;
        peeked(&format!("peek_queue of {}", q), r)
    };
    want_none("peek_queue of an empty queue", peek().await?)?;
    let (d1, d2) = (t.data("peek-1"), t.data("peek-2"));
    let id1 = t.publish(&q, &d1, 0, 1, 0).await?;
    // onceq knows the order of jobs to the millisecond (of two published
    // within one, it peeks either): the second goes in a later one.
    tokio::time::delay_for(Duration::from_millis(2)).await;
    let id2 = t.publish(&q, &d2, 0, 1, 0).await?;
    // lmstfy shows a job at once; a server may take a moment.
    let deadline = Instant::now() + WAIT;
    let first = loop {
        if let Some(data) = peek().await? {
            break data;
        }
        if Instant::now() > deadline {
            return Err(format!("peek_queue found no job in a queue of 2 within {:?}", WAIT));
        }
        tokio::time::delay_for(POLL).await;
    };
    want_job(
        "peek_queue of a queue of 2 (lmstfy: the first published)",
        Some(first),
        &d1,
    )?;
    // Both are still there; lmstfy hands them out in their order, onceq in
    // their keys' (docs/http-api.md).
    let mut want: BTreeSet<Vec<u8>> = vec![d1, d2].into_iter().collect();
    for _ in 0..2 {
        match t.consume(&q, 30, 3).await? {
            Some(data) if want.remove(&data) => {}
            got => {
                return Err(format!(
                    "consume after peek_queue: got {:?}, want a job peeked past",
                    got.map(|d| show(&d))
                ))
            }
        }
    }
    t.ack(&q, &id1).await?;
    t.ack(&q, &id2).await
}

/// peek-job: a job's data; none for a job the queue does not have.
async fn peek_job(t: &T) -> Check {
    let q = t.q("peekjob");
    let data = t.data("peekjob");
    let id = t.publish(&q, &data, 0, 1, 0).await?;
    want_job("peek_job", t.peek_job(&q, &id).await?, &data)?;
    want_none(
        "peek_job of an ID the queue never had",
        t.peek_job(&q, "01M8NX28J1YFSKD7Y7ER000002").await?,
    )?;
    t.ack(&q, &id).await
}

/// peek-dead-letter: lmstfy answers deadletter_size and deadletter_head,
/// which the crate cannot decode: an error that names `size`.
async fn peek_dead_letter(t: &T) -> Check {
    let q = t.q("peekdead");
    match bounded("peek_dead_letter", 0, t.c.peek_dead_letter(q.clone())).await? {
        Err(e) if e.err_type == ErrType::ResponseErr && e.reason.contains("missing field `size`") => Ok(()),
        Err(e) => Err(format!("peek_dead_letter: {}; want lmstfy's 200, which the crate reports as missing field `size`", e)),
        Ok((size, head)) => Err(format!(
            "peek_dead_letter: size {} head {:?}; lmstfy's answer (deadletter_size, deadletter_head) the crate cannot decode",
            size, head
        )),
    }
}

/// dead-letter: a job of 2 tries not acknowledged is handed out twice,
/// then lands in the dead letters; respawned, it is consumable again.
async fn dead_letter(t: &T) -> Check {
    let q = t.q("dead");
    let data = t.data("dead");
    let id = t.publish(&q, &data, 0, 2, 0).await?;
    want_job(
        "consume (ttr 1 s) of a job of 2 tries",
        t.consume(&q, 1, 3).await?,
        &data,
    )?;
    // Its second try for 3 s: the respawn below finds no dead letter.
    want_job(
        "consume of the job past its first try's ttr",
        t.consume(&q, 3, 15).await?,
        &data,
    )?;
    match t.respawn(&q, 10).await? {
        0 => {}
        n => {
            return Err(format!(
                "respawn_dead_letter while the job's last try runs respawned {}, want 0",
                n
            ))
        }
    }
    // Its last try's ttr passes: it is a dead letter, which lmstfy still
    // shows.
    t.respawned(&q, 10, 1).await?;
    want_job(
        "consume of the respawned dead letter",
        t.consume(&q, 30, 5).await?,
        &data,
    )?;
    t.ack(&q, &id).await?;
    want_none(
        "consume after the respawned job was acknowledged",
        t.consume(&q, 30, 1).await?,
    )?;
    match t.respawn(&q, 10).await? {
        0 => Ok(()),
        n => Err(format!(
            "respawn_dead_letter after the respawned job was acknowledged respawned {}, want 0",
            n
        )),
    }
}

/// respawn-limit: of 2 dead letters, a respawn of limit 1 respawns one at
/// a time; both are consumable again.
async fn respawn_limit(t: &T) -> Check {
    let q = t.q("respawnlimit");
    let (a, b) = (t.data("respawn-a"), t.data("respawn-b"));
    let ida = t.publish(&q, &a, 0, 1, 0).await?;
    let idb = t.publish(&q, &b, 0, 1, 0).await?;
    let mut want: BTreeSet<Vec<u8>> = vec![a, b].into_iter().collect();
    for _ in 0..2 {
        match t.consume(&q, 1, 3).await? {
            Some(data) if want.contains(&data) => {}
            got => return Err(format!("consume of a queue of 2 jobs: {:?}", got.map(|d| show(&d)))),
        }
    }
    t.respawned(&q, 1, 2).await?;
    for _ in 0..2 {
        match t.consume(&q, 30, 5).await? {
            Some(data) if want.remove(&data) => {}
            got => {
                return Err(format!(
                    "consume of 2 respawned dead letters: {:?}",
                    got.map(|d| show(&d))
                ))
            }
        }
    }
    t.ack(&q, &ida).await?;
    t.ack(&q, &idb).await
}

/// endpoint parses LMSTFY_URL: the crate takes a host and a port and
/// speaks plain HTTP.
fn endpoint(url: &str) -> Result<(String, u32), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!(
            "LMSTFY_URL={:?}: want http://host:port (the crate speaks plain HTTP)",
            url
        )
    })?;
    let rest = rest.trim_end_matches('/');
    let i = rest
        .rfind(':')
        .ok_or_else(|| format!("LMSTFY_URL={:?}: want http://host:port", url))?;
    let port = rest[i + 1..]
        .parse::<u32>()
        .map_err(|_| format!("LMSTFY_URL={:?}: the port is not a number", url))?;
    Ok((rest[..i].to_string(), port))
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{} is not set", name))
}

#[tokio::main]
async fn main() {
    let setup = || -> Result<T, String> {
        let (host, port) = endpoint(&env("LMSTFY_URL")?)?;
        let (ns, token) = (env("LMSTFY_NAMESPACE")?, env("LMSTFY_TOKEN")?);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        Ok(T {
            c: Client::new(&ns, &token, &host, port, 3, 1),
            run: format!("rs{:x}", nanos % (1 << 48)),
        })
    };
    let t = match setup() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("lmstfy-rust-compat: {}", e);
            std::process::exit(2);
        }
    };
    let known: BTreeSet<String> = std::env::var("LMSTFY_KNOWN")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let checks: Vec<(&str, LocalBoxFuture<Check>)> = vec![
        ("client-refusals", client_refusals(&t).boxed_local()),
        ("publish", publish(&t).boxed_local()),
        ("publish-refused", publish_refused(&t).boxed_local()),
        ("publish-delay", publish_delay(&t).boxed_local()),
        ("publish-ttl", publish_ttl(&t).boxed_local()),
        ("publish-ack", publish_ack(&t).boxed_local()),
        ("consume-empty", consume_empty(&t).boxed_local()),
        ("consume-timeout", consume_timeout(&t).boxed_local()),
        ("consume-long-poll", consume_long_poll(&t).boxed_local()),
        ("batch-consume", batch_consume(&t).boxed_local()),
        ("consume-from-queues", consume_from_queues(&t).boxed_local()),
        ("ack", ack(&t).boxed_local()),
        ("ack-pending", ack_pending(&t).boxed_local()),
        ("ack-unknown", ack_unknown(&t).boxed_local()),
        ("queue-size", queue_size(&t).boxed_local()),
        ("peek-queue", peek_queue(&t).boxed_local()),
        ("peek-job", peek_job(&t).boxed_local()),
        ("peek-dead-letter", peek_dead_letter(&t).boxed_local()),
        ("dead-letter", dead_letter(&t).boxed_local()),
        ("respawn-limit", respawn_limit(&t).boxed_local()),
    ];
    for name in &known {
        if !checks.iter().any(|(n, _)| n == name) {
            eprintln!("lmstfy-rust-compat: LMSTFY_KNOWN names {:?}, which is no check", name);
            std::process::exit(2);
        }
    }
    println!(
        "# run {}: {} checks against {}",
        t.run,
        checks.len(),
        std::env::var("LMSTFY_URL").unwrap_or_default()
    );
    let mut running: FuturesUnordered<_> = checks
        .into_iter()
        .map(|(name, check)| async move {
            let start = Instant::now();
            (name, check.await, start.elapsed())
        })
        .collect();
    let (mut passed, mut failed) = (0, 0);
    while let Some((name, result, took)) = running.next().await {
        match (result, known.contains(name)) {
            (Ok(()), false) => {
                passed += 1;
                println!("ok {} ({:.1} s)", name, took.as_secs_f64());
            }
            (Err(why), false) => {
                failed += 1;
                println!("FAIL {}: {}", name, why);
            }
            (Err(why), true) => println!("known {}: {}", name, why),
            (Ok(()), true) => {
                failed += 1;
                println!(
                    "FAIL {}: passes, and LMSTFY_KNOWN lists it as failing: take it off the list",
                    name
                );
            }
        }
    }
    println!(
        "# jobs seen: {} decoded by the crate, {} only in its decode error",
        DECODED.load(Ordering::Relaxed),
        UNDECODABLE.load(Ordering::Relaxed)
    );
    println!("# {} ok, {} FAIL", passed, failed);
    if failed > 0 {
        std::process::exit(1);
    }
}
