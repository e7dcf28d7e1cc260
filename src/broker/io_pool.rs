//! [`IoPool`]: the request queue and the io threads that run what is on it (Kafka's
//! `RequestChannel` + `KafkaRequestHandlerPool`, `num.io.threads` threads,
//! `queued.max.requests` requests).
//!
//! Two queues feed the same threads:
//!
//! - requests, from the network threads ([`IoPool::send_request`]): bounded by
//!   `queued.max.requests`; a network thread that finds it full waits for room, as Kafka's
//!   processor blocks on `RequestChannel.sendRequest` (back-pressure on the sockets it serves);
//! - jobs ([`IoPool::submit`]): completions of delayed operations
//!   ([`purgatory`](super::purgatory)), never bounded and taken first, so that an io thread
//!   never waits for room that only io threads can make (no deadlock: whatever an io thread
//!   submits, it never blocks on).
//!
//! An item is a closure; the io thread runs it and takes the next. A panicking closure (a bug) is
//! caught, counted ([`IoPool::panics`]) and logged; what it owned is dropped while unwinding (a
//! request's `Responder` then closes its connection), and the thread goes on.
//!
//! [`IoPool::close`] stops taking requests; the threads run what is queued, then exit. Jobs
//! submitted after that run on the submitting thread.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// One piece of work for an io thread.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

/// Pools made so far: each gets its own id, so a thread of one broker's pool is never taken for
/// one of another's (tests run several brokers in one process).
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (pool id, index) of the io thread running here; `None` on other threads.
    static IO_THREAD: std::cell::Cell<Option<(u64, usize)>> = const { std::cell::Cell::new(None) };
}

/// The request queue and the io threads (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct IoPool {
    id: u64,
    threads: usize,
    max_queued: usize,
    queues: Mutex<Queues>,
    /// Io threads wait here for work.
    work: Condvar,
    /// Network threads wait here for room in the request queue.
    room: Condvar,
    panics: AtomicU64,
}

#[derive(Default)]
struct Queues {
    jobs: VecDeque<Job>,
    requests: VecDeque<Job>,
    closed: bool,
}

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues")
            .field("jobs", &self.jobs.len())
            .field("requests", &self.requests.len())
            .field("closed", &self.closed)
            .finish()
    }
}

impl IoPool {
    /// A pool of `threads` io threads (at least 1) with room for `max_queued` requests (at least
    /// 1); no thread runs before [`Self::start`].
    pub(crate) fn new(threads: usize, max_queued: usize) -> Arc<IoPool> {
        Arc::new(IoPool {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            threads: threads.max(1),
            max_queued: max_queued.max(1),
            queues: Mutex::new(Queues::default()),
            work: Condvar::new(),
            room: Condvar::new(),
            panics: AtomicU64::new(0),
        })
    }

    /// Starts the io threads, named `{name}{index}`.
    ///
    /// Errors: the OS refused a thread (those already started keep running until
    /// [`Self::close`]).
    pub(crate) fn start(self: &Arc<Self>, name: &str) -> io::Result<Vec<JoinHandle<()>>> {
        (0..self.threads)
            .map(|index| {
                let pool = Arc::clone(self);
                std::thread::Builder::new().name(format!("{name}{index}")).spawn(move || pool.run(index))
            })
            .collect()
    }

    /// The number of io threads (`num.io.threads`).
    pub(crate) fn threads(&self) -> usize {
        self.threads
    }

    /// The index of the io thread of THIS pool running the caller, `None` on any other thread.
    pub(crate) fn current_thread(&self) -> Option<usize> {
        IO_THREAD.get().and_then(|(pool, index)| (pool == self.id).then_some(index))
    }

    fn lock(&self) -> MutexGuard<'_, Queues> {
        // The queues are changed in single statements: a poisoned lock still holds valid queues.
        self.queues.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues a request, waiting while `queued.max.requests` are queued already. Gives the job
    /// back when the pool is closed.
    pub(crate) fn send_request(&self, job: Job) -> Result<(), Job> {
        let mut queues = self.lock();
        while !queues.closed && queues.requests.len() >= self.max_queued {
            queues = self.room.wait(queues).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        if queues.closed {
            return Err(job);
        }
        queues.requests.push_back(job);
        drop(queues);
        self.work.notify_one();
        Ok(())
    }

    /// Runs `job` on an io thread, before any queued request; never waits. After
    /// [`Self::close`] the job runs on the calling thread instead.
    pub(crate) fn submit(&self, job: Job) {
        let mut queues = self.lock();
        if queues.closed {
            drop(queues);
            self.run_job(job);
            return;
        }
        queues.jobs.push_back(job);
        drop(queues);
        self.work.notify_one();
    }

    /// Stops taking requests and jobs: the io threads run what is queued, then exit.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.work.notify_all();
        self.room.notify_all();
    }

    /// Closures that panicked on an io thread (a bug: every request gets an answer or a close).
    pub(crate) fn panics(&self) -> u64 {
        self.panics.load(Ordering::SeqCst)
    }

    fn run(&self, index: usize) {
        IO_THREAD.set(Some((self.id, index)));
        loop {
            let mut queues = self.lock();
            let job = loop {
                if let Some(job) = queues.jobs.pop_front() {
                    break job;
                }
                if let Some(job) = queues.requests.pop_front() {
                    self.room.notify_one();
                    break job;
                }
                if queues.closed {
                    return;
                }
                queues = self.work.wait(queues).unwrap_or_else(|poisoned| poisoned.into_inner());
            };
            drop(queues);
            self.run_job(job);
        }
    }

    fn run_job(&self, job: Job) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
            self.panics.fetch_add(1, Ordering::SeqCst);
            tracing::error!("a request or completion panicked on an io thread (a bug); its connection is closed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn jobs_run_before_requests_and_close_drains_the_queues() {
        let pool = IoPool::new(1, 10);
        let (tx, rx) = mpsc::channel();
        for i in 0..3 {
            let tx = tx.clone();
            assert!(pool.send_request(Box::new(move || tx.send(("request", i)).unwrap())).is_ok());
        }
        let tx2 = tx.clone();
        pool.submit(Box::new(move || tx2.send(("job", 0)).unwrap()));
        let threads = pool.start("test-io").unwrap();
        pool.close();
        for t in threads {
            t.join().unwrap();
        }
        let order: Vec<_> = rx.try_iter().collect();
        assert_eq!(order, [("job", 0), ("request", 0), ("request", 1), ("request", 2)]);
        // Closed: requests come back, jobs run here.
        assert!(pool.send_request(Box::new(|| {})).is_err());
        pool.submit(Box::new(move || tx.send(("late job", 0)).unwrap()));
        assert_eq!(rx.try_recv().unwrap(), ("late job", 0));
    }

    #[test]
    fn a_full_request_queue_makes_the_sender_wait_for_room() {
        let pool = IoPool::new(1, 1);
        assert!(pool.send_request(Box::new(|| {})).is_ok());
        let sender = {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || pool.send_request(Box::new(|| {})).is_ok())
        };
        // The sender stays blocked until an io thread takes the first request.
        let threads = pool.start("test-io").unwrap();
        assert!(sender.join().unwrap());
        pool.close();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_panicking_job_is_counted_and_the_thread_goes_on() {
        let pool = IoPool::new(1, 10);
        let threads = pool.start("test-io").unwrap();
        pool.submit(Box::new(|| panic!("a bug")));
        let (tx, rx) = mpsc::channel();
        pool.submit(Box::new(move || tx.send(()).unwrap()));
        rx.recv().unwrap();
        assert_eq!(pool.panics(), 1);
        pool.close();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn current_thread_knows_its_own_pool_only() {
        let a = IoPool::new(1, 10);
        let b = IoPool::new(1, 10);
        assert_eq!(a.current_thread(), None);
        let threads = a.start("test-io").unwrap();
        let (tx, rx) = mpsc::channel();
        let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
        a.submit(Box::new(move || tx.send((a2.current_thread(), b2.current_thread())).unwrap()));
        assert_eq!(rx.recv().unwrap(), (Some(0), None));
        a.close();
        for t in threads {
            t.join().unwrap();
        }
    }
}
