//! JoinGroup and SyncGroup requests that wait for their group, holding no thread: Kafka's
//! `DelayedJoin` / `DelayedSync` in the broker's [`Purgatory`], watched by
//! [`WatchKey::Group`].
//!
//! A JoinGroup that must wait for the rebalance to complete, or a follower's SyncGroup that must
//! wait for the leader's assignment, gets a [`Parked`] ticket from the coordinator
//! ([`GroupCoordinator::begin_join`](super::runtime::GroupCoordinator::begin_join) /
//! [`begin_sync`](super::runtime::GroupCoordinator::begin_sync)). The handler wraps the ticket
//! and its [`Responder`] in a [`DelayedGroupRequest`] and parks it with [`park`]; its io thread
//! returns at once. Then:
//!
//! - a change of ITS group that made answers (a completed join, the leader's stored
//!   assignment, a removal, a timer) calls [`GroupWaiters::group_changed`], which the purgatory
//!   implements ([`PurgatoryWaiters`]) as `check_and_complete(WatchKey::Group(id))`: only the
//!   requests of that group are tried, on the io pool, each looking for its answer under its
//!   shard's lock ([`poll_parked`](super::runtime::GroupCoordinator::poll_parked)) and sending it
//!   through its Responder. A heartbeat makes no answer and tries nothing;
//! - at its deadline (the group's rebalance timeout and a margin, a safety net: the state machine
//!   answers before) it is answered with its answer if there is one, else REBALANCE_IN_PROGRESS
//!   (COORDINATOR_NOT_AVAILABLE when the broker stops: the purgatory's shutdown expires it);
//! - when its client hangs up it is dropped (the purgatory's sweep): its ticket is abandoned and
//!   its Responder dropped unanswered. The member itself stays, as in Kafka (whose `DelayedJoin`
//!   lives on whether or not the client is there): it counts as joined, its answer is discarded
//!   when the rebalance completes, and its session then times out without heartbeats
//!   ([`Group::abandon`](super::group::Group::abandon)).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::group::Completion;
use super::runtime::{Parked, ParkedPoll};
use super::wakeup::GroupWaiters;
use crate::broker::errors;
use crate::broker::purgatory::{DelayedOperation, Purgatory, WatchKey};
use crate::broker::responder::{ConnectionProbe, Responder};
use crate::broker::response::Response;
use crate::broker::shared::Shared;

/// Builds the response of a parked request from its answer, or from the error to answer when
/// none will come.
pub(crate) type EncodeAnswer = Box<dyn Fn(Result<Completion, i16>) -> Response + Send + Sync>;

/// The key a parked request of `group_id` watches.
pub(crate) fn watch_key(group_id: &str) -> WatchKey {
    WatchKey::Group(group_id.to_string())
}

/// When a ticket whose deadline is `deadline_ms` (ms since the epoch) expires, as an
/// [`Instant`].
fn deadline_instant(deadline_ms: i64) -> Instant {
    let left = deadline_ms.saturating_sub(now_ms()).max(0);
    Instant::now() + Duration::from_millis(u64::try_from(left).unwrap_or(0))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A JoinGroup or SyncGroup waiting in the purgatory for its group (Kafka's `DelayedJoin` /
/// `DelayedSync`; see the [module docs](self)).
pub(crate) struct DelayedGroupRequest {
    shared: Arc<Shared>,
    parked: Parked,
    deadline: Instant,
    connection: ConnectionProbe,
    encode: EncodeAnswer,
    /// Taken by the completion that answers.
    responder: Mutex<Option<Responder>>,
}

impl DelayedGroupRequest {
    /// The request parked as `parked`, answered through `responder` with `encode`.
    pub(crate) fn new(parked: Parked, encode: EncodeAnswer, responder: Responder) -> DelayedGroupRequest {
        DelayedGroupRequest {
            shared: Arc::clone(responder.shared()),
            deadline: deadline_instant(parked.deadline),
            parked,
            connection: responder.connection_probe(),
            encode,
            responder: Mutex::new(Some(responder)),
        }
    }

    fn take_responder(&self) -> Option<Responder> {
        self.responder.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    }

    fn respond(&self, answer: Result<Completion, i16>) {
        if let Some(responder) = self.take_responder() {
            responder.send((self.encode)(answer));
        }
    }

    /// The client is gone: the ticket is abandoned and the Responder dropped unanswered.
    fn drop_unanswered(&self) {
        let _ = self.shared.coordinator().give_up_parked(&self.parked);
        if let Some(responder) = self.take_responder() {
            tracing::debug!(
                "{}: a waiting group request of {} (correlation id {}) is dropped: its client went away",
                responder.peer(),
                self.parked.group_id,
                responder.correlation_id()
            );
        }
    }

    /// The error for a request that gets no answer.
    fn no_answer(&self) -> i16 {
        if self.shared.is_shutting_down() {
            errors::COORDINATOR_NOT_AVAILABLE
        } else {
            errors::REBALANCE_IN_PROGRESS
        }
    }
}

impl DelayedOperation for DelayedGroupRequest {
    fn try_complete(&self) -> bool {
        if self.connection.is_closed() {
            self.drop_unanswered();
            return true;
        }
        match self.shared.coordinator().poll_parked(&self.parked, now_ms()) {
            ParkedPoll::Ready(answer) => self.respond(Ok(answer)),
            ParkedPoll::Gone => self.respond(Err(self.no_answer())),
            ParkedPoll::Pending => return false,
        }
        true
    }

    fn on_expiration(&self) {
        if self.connection.is_closed() {
            self.drop_unanswered();
            return;
        }
        match self.shared.coordinator().give_up_parked(&self.parked) {
            Some(answer) => self.respond(Ok(answer)),
            None => self.respond(Err(self.no_answer())),
        }
    }

    fn deadline(&self) -> Instant {
        self.deadline
    }

    fn is_connection_closed(&self) -> bool {
        self.connection.is_closed()
    }
}

/// Parks `op` in the broker's purgatory, watching its group ([`watch_key`]); returns at once.
pub(crate) fn park(shared: &Shared, op: DelayedGroupRequest) {
    let key = watch_key(&op.parked.group_id);
    shared.purgatory().try_complete_else_watch(Arc::new(op), &[key]);
}

/// The coordinator's [`GroupWaiters`]: a change of group X tries the purgatory's operations
/// watching `WatchKey::Group(X)`, and only those, on the io pool.
#[derive(Debug)]
pub(crate) struct PurgatoryWaiters(pub(crate) Arc<Purgatory>);

impl GroupWaiters for PurgatoryWaiters {
    fn group_changed(&self, group_id: &str) {
        self.0.check_and_complete(&watch_key(group_id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::coordinator::group::{GroupConfig, JoinRequest, MemberRef, SyncRequest};
    use crate::broker::coordinator::runtime::{Answer, CoordinatorConfig, GroupCoordinator, OffsetsStorage};
    use crate::broker::io_pool::IoPool;
    use bytes::Bytes;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc;

    /// Records nothing; every append succeeds.
    struct NoStorage;

    impl OffsetsStorage for NoStorage {
        fn append(&self, _: i32, _: Vec<(Vec<u8>, Option<Vec<u8>>)>, _: i64) -> Result<i64, (i16, String)> {
            Ok(0)
        }

        fn append_transactional(
            &self,
            _: i32,
            _: i64,
            _: i16,
            _: Vec<(Vec<u8>, Option<Vec<u8>>)>,
            _: i64,
        ) -> Result<i64, (i16, String)> {
            Ok(0)
        }
    }

    /// A [`DelayedGroupRequest`] without a connection: counts its tries, reports its answer.
    struct Probe {
        coordinator: Arc<GroupCoordinator>,
        parked: Parked,
        tries: AtomicU64,
        done: Mutex<mpsc::Sender<Result<Completion, i16>>>,
    }

    impl DelayedOperation for Probe {
        fn try_complete(&self) -> bool {
            self.tries.fetch_add(1, Ordering::SeqCst);
            let answer = match self.coordinator.poll_parked(&self.parked, now_ms()) {
                ParkedPoll::Ready(answer) => Ok(answer),
                ParkedPoll::Gone => Err(errors::REBALANCE_IN_PROGRESS),
                ParkedPoll::Pending => return false,
            };
            self.done.lock().unwrap().send(answer).unwrap();
            true
        }
        fn on_expiration(&self) {
            let answer = self.coordinator.give_up_parked(&self.parked).ok_or(errors::REBALANCE_IN_PROGRESS);
            self.done.lock().unwrap().send(answer).unwrap();
        }
        fn deadline(&self) -> Instant {
            deadline_instant(self.parked.deadline)
        }
        fn is_connection_closed(&self) -> bool {
            false
        }
    }

    fn join_request(client: &str) -> JoinRequest {
        JoinRequest {
            client_id: client.into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 10_000,
            session_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"sub"))],
            ..JoinRequest::default()
        }
    }

    const RECV: Duration = Duration::from_secs(30);

    /// A heartbeat of group X tries none of group Y's waiting requests; Y's own change tries
    /// them (and only Y's), which answers them through the purgatory.
    #[test]
    fn a_heartbeat_of_x_tries_no_waiting_request_of_y() {
        let pool = IoPool::new(2, 100);
        let mut threads = pool.start("test-io").unwrap();
        let purgatory = Purgatory::new(Arc::clone(&pool));
        threads.push(purgatory.start_timer().unwrap());
        let c = Arc::new(GroupCoordinator::new(CoordinatorConfig {
            group: GroupConfig { initial_rebalance_delay_ms: 0, ..GroupConfig::default() },
            ..CoordinatorConfig::default()
        }));
        c.set_waiters(Arc::new(PurgatoryWaiters(Arc::clone(&purgatory))));
        c.finish_loading();
        let (tx, rx) = mpsc::channel();
        let probe = |parked: Parked| {
            Arc::new(Probe {
                coordinator: Arc::clone(&c),
                parked,
                tries: AtomicU64::new(0),
                done: Mutex::new(tx.clone()),
            })
        };

        // X: one member, Stable (the test runs the timer that ends the initial delay).
        let Answer::Parked(x) = c.begin_join(&NoStorage, "x", join_request("cx")) else { panic!("X joined at once") };
        let x_join = probe(x);
        purgatory.try_complete_else_watch(x_join.clone(), &[watch_key("x")]);
        c.timer_pass(&NoStorage);
        let Ok(Completion::Join(x)) = rx.recv_timeout(RECV).unwrap() else { panic!("X's join failed") };
        let sync = SyncRequest {
            member: MemberRef { member_id: &x.member_id, group_instance_id: None, generation_id: x.generation_id },
            protocol_type: None,
            protocol_name: None,
            assignments: vec![(x.member_id.clone(), Bytes::from_static(b"a"))],
        };
        let Answer::Now(s) = c.begin_sync(&NoStorage, "x", sync) else { panic!("X's leader waited") };
        assert_eq!(s.error, errors::NONE);

        // Y: a join waiting in the purgatory (its initial delay has not passed: no timer run).
        let Answer::Parked(y) = c.begin_join(&NoStorage, "y", join_request("cy")) else { panic!("Y joined at once") };
        let y_join = probe(y);
        purgatory.try_complete_else_watch(y_join.clone(), &[watch_key("y")]);
        let y_tries = y_join.tries.load(Ordering::SeqCst);
        let (x_tries, checks) = (x_join.tries.load(Ordering::SeqCst), purgatory.checks());
        for _ in 0..100 {
            let me = MemberRef { member_id: &x.member_id, group_instance_id: None, generation_id: x.generation_id };
            assert_eq!(c.heartbeat("x", me), errors::NONE);
        }
        // Anything X's heartbeats queued would run on the io pool: let it drain first.
        // Both io threads meet here only once they ran everything queued before.
        let barrier = Arc::new(std::sync::Barrier::new(3));
        for _ in 0..2 {
            let barrier = Arc::clone(&barrier);
            pool.submit(Box::new(move || {
                barrier.wait();
            }));
        }
        barrier.wait();
        assert_eq!(y_join.tries.load(Ordering::SeqCst), y_tries, "a heartbeat of X tried Y's waiting join");
        assert_eq!(x_join.tries.load(Ordering::SeqCst), x_tries, "X's completed join was tried again");
        assert_eq!(purgatory.checks(), checks, "a heartbeat tried a waiting request");
        assert!(rx.try_recv().is_err());

        // Y's own change (its rebalance completes on the timer) answers Y's join.
        c.timer_pass(&NoStorage);
        let Ok(Completion::Join(y)) = rx.recv_timeout(RECV).unwrap() else { panic!("Y's join failed") };
        assert_eq!((y.error, y.generation_id), (errors::NONE, 1));
        assert!(y_join.tries.load(Ordering::SeqCst) > y_tries);
        assert_eq!(x_join.tries.load(Ordering::SeqCst), x_tries, "Y's change tried X's operation");
        // The completion answers (the channel) before the purgatory counts the operation out:
        // wait for the count, generously.
        let deadline = std::time::Instant::now() + RECV;
        while purgatory.delayed() != 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(purgatory.delayed(), 0);

        purgatory.shutdown();
        pool.close();
        for t in threads {
            t.join().unwrap();
        }
    }
}
