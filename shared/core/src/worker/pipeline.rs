//! The worker's pipeline: claimed jobs wait in a local queue, a call starts as soon as a slot
//! is free, finished attempts are written per [`TICK`], and the next claim rides with a
//! write once the local queue holds less than one wave of calls, so the slots never idle
//! between batches.
//!
//! One statement is in flight at a time (a worker holds one connection). A call starts only
//! while fewer than [`window`] messages are handed over and not yet recorded (in flight,
//! finished and waiting for their write, or being written): a kill re-sends at most that
//! many (decision 0007), however fast the provider answers.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use uuid::Uuid;

use super::{
    Attempt, BatchCounts, Latencies, Outcome, SAFETY_MARGIN, WorkerConfig, attempt, completion,
    give_back, record,
};
use crate::delivery::{Deliverer, NotNow};
use crate::store::{ClaimedJob, CompleteReport, Completion, JobStore, StoreError};

/// How long a finished attempt may wait for its write when nothing else is due to be written
/// (a full window, a claim, the pipeline's end): one statement per tick, not per answer.
pub const TICK: Duration = Duration::from_millis(50);

/// Messages a worker may have handed to the provider and not yet recorded: twice its calls in
/// flight, so the next wave runs while the last one's results are written.
pub fn window(cfg: &WorkerConfig) -> usize {
    2 * cfg.concurrency.max(1)
}

/// A job given back untried: (id, claim token, due again; `None`: at once).
pub(super) type GiveBack = (Uuid, Uuid, Option<DateTime<Utc>>);

/// What one write did.
struct Written {
    completions: Vec<Completion>,
    released: u64,
    asked: u32,
    result: Result<(CompleteReport, Vec<ClaimedJob>), StoreError>,
}

/// Why [`Pipeline::step`] came back.
pub(super) enum Step {
    /// A claim carried by a write answered; the pipeline goes on.
    Claimed,
    /// Everything claimed is recorded or given back, and the pipeline may claim no more
    /// (the queue ran dry, the worker left its slot, no send slot or no time is left).
    Idle,
}

/// What to wait for next.
enum Event {
    Written(Written),
    Done((ClaimedJob, Outcome)),
    Tick,
}

pub(super) struct Pipeline<'a> {
    store: &'a dyn JobStore,
    deliverer: &'a dyn Deliverer,
    cfg: &'a WorkerConfig,
    deadline: Instant,
    /// Claimed, not started, in the claim's (lane) order.
    local: VecDeque<ClaimedJob>,
    calls: FuturesUnordered<BoxFuture<'a, (ClaimedJob, Outcome)>>,
    /// The calls' jobs and whether each was handed to the provider: one never handed over
    /// goes back (attempt refunded) when a store error stops the pipeline.
    started: HashMap<Uuid, (Uuid, Arc<AtomicBool>)>,
    /// Finished attempts not yet written, and when the oldest finished.
    pending: Vec<Completion>,
    pending_since: Option<Instant>,
    /// Jobs the deliverer did not admit, or that no call could start for before the
    /// deadline: given back with the next write.
    give_back: Vec<GiveBack>,
    write: Option<BoxFuture<'a, Written>>,
    /// Completions in the write in flight.
    writing: usize,
    /// A claim answered fewer jobs than asked: none until the pipeline is empty again.
    dry: bool,
    /// A job found no send slot before the deadline: claim no more.
    paced_out: bool,
    /// A claim since [`Pipeline::take_full`] found as many jobs as it asked for.
    full: bool,
    counts: BatchCounts,
}

impl<'a> Pipeline<'a> {
    pub(super) fn new(
        store: &'a dyn JobStore,
        deliverer: &'a dyn Deliverer,
        cfg: &'a WorkerConfig,
        deadline: Instant,
    ) -> Self {
        Self {
            store,
            deliverer,
            cfg,
            deadline,
            local: VecDeque::new(),
            calls: FuturesUnordered::new(),
            started: HashMap::new(),
            pending: Vec::new(),
            pending_since: None,
            give_back: Vec::new(),
            write: None,
            writing: 0,
            dry: false,
            paced_out: false,
            full: false,
            counts: BatchCounts::default(),
        }
    }

    /// Adds jobs claimed outside the pipeline (the first claim, a poll's).
    pub(super) fn push(&mut self, jobs: Vec<ClaimedJob>) {
        if jobs.is_empty() {
            return;
        }
        self.counts.claimed += jobs.len() as u64;
        self.counts.batches += 1;
        self.full |= jobs.len() >= self.cfg.batch_size as usize;
        self.local.extend(jobs);
        self.dry = false;
        self.paced_out = false;
    }

    /// What was done since the last call (the counts start again from zero).
    pub(super) fn take_counts(&mut self) -> BatchCounts {
        std::mem::take(&mut self.counts)
    }

    /// Whether a claim since the last call found the queue full (a backlog).
    pub(super) fn take_full(&mut self) -> bool {
        std::mem::take(&mut self.full)
    }

    /// The provider calls' latencies since [`Pipeline::take_counts`].
    pub(super) fn latencies(&self) -> &Latencies {
        &self.counts.latencies
    }

    /// A job found no send slot before the deadline since the pipeline was last empty.
    pub(super) fn paced_out(&self) -> bool {
        self.paced_out
    }

    fn is_empty(&self) -> bool {
        self.local.is_empty()
            && self.calls.is_empty()
            && self.pending.is_empty()
            && self.give_back.is_empty()
            && self.write.is_none()
    }

    /// Handed over (or about to be) and not yet recorded.
    fn unrecorded(&self) -> usize {
        self.calls.len() + self.pending.len() + self.writing
    }

    /// Runs until a claim carried by a write answers, or the pipeline is empty and may not
    /// claim (`may_claim`: the worker holds its slot). A store error stops it: what is in
    /// flight is left to the sweeper, what was never handed over goes back.
    pub(super) async fn step(&mut self, may_claim: bool) -> Result<Step, StoreError> {
        loop {
            self.start_calls();
            if self.write.is_none() {
                self.maybe_write(may_claim);
            }
            if self.is_empty() {
                return Ok(Step::Idle);
            }
            let tick = self.pending_since.map(|at| (at + TICK).into());
            let event = {
                let (write, calls) = (&mut self.write, &mut self.calls);
                tokio::select! {
                    written = async { write.as_mut().expect("guarded").await }, if write.is_some() => {
                        Event::Written(written)
                    }
                    Some(done) = calls.next(), if !calls.is_empty() => Event::Done(done),
                    () = tokio::time::sleep_until(tick.unwrap_or_else(tokio::time::Instant::now)),
                        if tick.is_some() && write.is_none() => Event::Tick,
                    // not reached: a pipeline that is not empty has a call, a write or a
                    // finished attempt waiting for its tick
                    else => Event::Tick,
                }
            };
            match event {
                Event::Done((job, outcome)) => self.finished(job, outcome),
                Event::Tick => {}
                Event::Written(written) => {
                    self.write = None;
                    self.writing = 0;
                    if let Some(step) = self.written(written).await? {
                        return Ok(step);
                    }
                }
            }
        }
    }

    /// Starts calls from the local queue while a slot and the window allow; a job no call can
    /// finish for before the deadline goes back untried.
    fn start_calls(&mut self) {
        while self.calls.len() < self.cfg.concurrency.max(1) && self.unrecorded() < window(self.cfg)
        {
            let Some(job) = self.local.pop_front() else {
                return;
            };
            let remaining = self.deadline.saturating_duration_since(Instant::now());
            if remaining < self.cfg.provider_timeout + SAFETY_MARGIN {
                self.give_back.push((job.id, job.claim_token, None));
                continue;
            }
            let handed = Arc::new(AtomicBool::new(false));
            self.started
                .insert(job.id, (job.claim_token, Arc::clone(&handed)));
            let (deliverer, timeout, deadline) =
                (self.deliverer, self.cfg.provider_timeout, self.deadline);
            self.calls
                .push(Box::pin(attempt(deliverer, job, timeout, deadline, handed)));
        }
    }

    /// A call ended: its attempt waits for the next write.
    fn finished(&mut self, job: ClaimedJob, outcome: Outcome) {
        self.started.remove(&job.id);
        match outcome {
            Outcome::Tried(attempt) => {
                if let Some(ms) = attempt.provider_ms {
                    self.counts.latencies.add(job.channel, ms);
                }
                self.pending.push(decided(&job, attempt));
                self.pending_since.get_or_insert_with(Instant::now);
            }
            Outcome::NotSent(not_now) => {
                self.paced_out |= matches!(not_now, NotNow::NoSlot { .. });
                let due = match not_now {
                    NotNow::NoSlot { .. } => None,
                    NotNow::Held { until } => Some(until),
                };
                self.give_back.push((job.id, job.claim_token, due));
            }
        }
    }

    /// Starts a write when one is due: the finished attempts after a [`TICK`], at once when
    /// the window is full or nothing else runs, with a claim once the local queue holds less
    /// than a wave of calls (while calls run: an empty pipeline claims through the caller,
    /// which lingers or polls).
    fn maybe_write(&mut self, may_claim: bool) {
        let running = !(self.calls.is_empty() && self.local.is_empty());
        let claim = if running
            && may_claim
            && !self.dry
            && !self.paced_out
            && self.local.len() < self.cfg.concurrency.max(1)
        {
            self.claim_size()
        } else {
            0
        };
        let ticked = self.pending_since.is_some_and(|at| at.elapsed() >= TICK);
        let flush = !self.pending.is_empty()
            && (ticked || !running || self.unrecorded() >= window(self.cfg));
        if claim == 0 && !flush && (running || self.give_back.is_empty()) {
            return;
        }
        let completions = std::mem::take(&mut self.pending);
        self.pending_since = None;
        self.writing = completions.len();
        let give = std::mem::take(&mut self.give_back);
        let store = self.store;
        self.write = Some(Box::pin(async move {
            let released = if give.is_empty() {
                0
            } else {
                give_back(store, &give).await
            };
            let result = record(store, &completions, claim).await;
            Written {
                completions,
                released,
                asked: claim,
                result,
            }
        }));
    }

    /// Jobs the next claim may take: as many as still fit the deadline beside those claimed
    /// already ([`super::batch_size_for`]), at most a batch.
    fn claim_size(&self) -> u32 {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let held = (self.local.len() + self.calls.len()) as u32;
        let room = super::waves_for(self.cfg, remaining)
            .saturating_mul(self.cfg.concurrency.max(1) as u32);
        self.cfg.batch_size.min(room.saturating_sub(held))
    }

    /// A write came back: counts what it applied and adds what it claimed.
    async fn written(&mut self, w: Written) -> Result<Option<Step>, StoreError> {
        self.counts.released += w.released;
        match w.result {
            Ok((report, claimed)) => {
                self.counts.add(&w.completions, &report);
                if w.asked == 0 {
                    return Ok(None);
                }
                let got = claimed.len();
                if got < w.asked as usize {
                    self.dry = true;
                } else {
                    self.full = true;
                }
                if got > 0 {
                    self.counts.claimed += got as u64;
                    self.counts.batches += 1;
                    self.local.extend(claimed);
                }
                Ok(Some(Step::Claimed))
            }
            Err(err) => {
                // stop here: what is in flight is left to the sweeper (the provider may have
                // been called); what was never handed over goes back, its attempt refunded
                self.calls.clear();
                let untried: Vec<GiveBack> = self
                    .local
                    .drain(..)
                    .map(|job| (job.id, job.claim_token))
                    .chain(
                        self.started
                            .drain()
                            .filter(|(_, (_, handed))| !handed.load(Ordering::SeqCst))
                            .map(|(id, (token, _))| (id, token)),
                    )
                    .map(|(id, token)| (id, token, None))
                    .chain(self.give_back.drain(..))
                    .collect();
                let released = give_back(self.store, &untried).await;
                tracing::warn!(
                    released,
                    "the worker stopped early; untried jobs given back"
                );
                self.counts.released += released;
                Err(err)
            }
        }
    }
}

/// The completion of one attempt (decided, and logged when a person may need to see it).
fn decided(job: &ClaimedJob, attempt: Attempt) -> Completion {
    completion(job, attempt, Utc::now(), &mut rand::rng())
}
