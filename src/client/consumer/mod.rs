//! fetchbench's own Kafka consumer: blocking, one application thread plus a heartbeat thread,
//! configured with Kafka's config names ([`ConsumerConfig`]), modelled on Kafka's
//! `KafkaConsumer`.
//!
//! Two ways to get partitions:
//!
//! * [`Consumer::assign`]: the application names the partitions; no group, no commits unless
//!   `group.id` is set (then commits and `committed` work, but nothing is coordinated);
//! * [`Consumer::subscribe`] / [`Consumer::subscribe_pattern`]: the group coordinator shares
//!   the partitions of the topics among the group's members (module `group`): JoinGroup / SyncGroup
//!   with the consumer protocol, the leader running the assignor of
//!   `partition.assignment.strategy` ([`crate::client::assignor`]), eager or cooperative
//!   (KIP-429) rebalances, a [`RebalanceListener`] told of assigned, revoked and lost
//!   partitions.
//!
//! [`Consumer::poll`] rejoins the group when needed, initializes positions (the committed
//! offset, else `auto.offset.reset` via ListOffsets, once per assignment), and returns up to
//! `max.poll.records` records. Fetching ([`fetcher`]) keeps one Fetch in flight per broker
//! connection and sends the next one before handing out the records of the last one.
//!
//! Positions and commits follow Kafka: [`Consumer::position`] is the offset of the next record
//! `poll` returns; a commit stores the next offset to read (last processed + 1);
//! `enable.auto.commit` commits the positions every `auto.commit.interval.ms` from `poll`,
//! before a rebalance revokes partitions, and in [`Consumer::close`].
//!
//! Files: this one holds the [`Consumer`] API (Kafka's `KafkaConsumer`: subscriptions,
//! metadata, positions, commits) and the [`RebalanceListener`]; `config.rs` the
//! [`ConsumerConfig`] (Kafka's `ConsumerConfig`); `error.rs` the [`ConsumerError`]; `record.rs`
//! the [`ConsumerRecord`]; [`fetcher`] the Fetch requests and record decoding (Kafka's
//! `Fetcher`); `group.rs` the group membership (Kafka's `ConsumerCoordinator`: JoinGroup,
//! SyncGroup, heartbeats, commits).

mod config;
pub mod drain;
mod error;
pub mod fetcher;
pub(crate) mod group;
mod record;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsRequest, MetadataRequest, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

pub use crate::client::assignor::TopicPartition;
use crate::client::assignor::{
    assignor_by_name, decode_assignment, perform_assignment, GroupMember, RebalanceProtocol,
};
use crate::client::connection::KafkaConnection;
pub use crate::log::batch::mixed::{DecodedHeader, TimestampType};
pub use config::{ConsumerConfig, FetchMode, OffsetReset, CONFIG_KEYS};
pub use drain::{CrcCheck, DrainedBatch};
use error::fmt_partitions;
pub use error::ConsumerError;
use fetcher::{FetchSettings, Fetcher};
use group::{GroupSettings, Membership};
pub use record::ConsumerRecord;

/// Told of partition changes in a group, from inside [`Consumer::poll`] and
/// [`Consumer::close`] (Kafka's `ConsumerRebalanceListener`).
pub trait RebalanceListener: Send {
    /// Partitions taken away in a rebalance (eager: all, before rejoining; cooperative: only
    /// those moving to another member). Positions are committed before this when auto-commit
    /// is on.
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition]) {
        let _ = partitions;
    }
    /// Partitions given to this member (cooperative: only the new ones; possibly none).
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]) {
        let _ = partitions;
    }
    /// Partitions lost without a chance to commit (the generation ended: session or poll
    /// timeout, fenced). Calls [`Self::on_partitions_revoked`] by default, as Kafka does.
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(partitions);
    }
}

/// What the consumer subscribes to.
#[derive(Debug)]
enum Subscription {
    None,
    Assigned,
    Topics(Vec<String>),
    Pattern(regex::Regex),
}

/// Brokers and partition leaders from Metadata.
#[derive(Debug, Default)]
struct Cluster {
    brokers: HashMap<i32, String>,
    leaders: HashMap<TopicPartition, i32>,
    partition_counts: BTreeMap<String, i32>,
    /// The topics Metadata marked `is_internal` (`__consumer_offsets`, ...).
    internal: BTreeSet<String>,
    /// Error codes of the last Metadata answer: per topic (`(topic, -1)`) and per partition.
    errors: HashMap<TopicPartition, i16>,
}

impl Cluster {
    /// Why `tp` has no leader, from the last Metadata answer (for the report of partitions
    /// without a leader).
    fn no_leader_reason(&self, tp: &TopicPartition) -> String {
        if let Some(&code) = self.errors.get(&(tp.0.clone(), -1)) {
            return format!("Metadata of {}: {}", tp.0, error_name(code));
        }
        if let Some(&code) = self.errors.get(tp) {
            return format!("Metadata: {}", error_name(code));
        }
        match self.partition_counts.get(&tp.0) {
            Some(&n) if tp.1 < 0 || tp.1 >= n => {
                format!("{}: {} has {n} partitions", error_name(UNKNOWN_TOPIC_OR_PARTITION), tp.0)
            }
            Some(_) => "Metadata names no leader".into(),
            None => format!("{} not in Metadata", tp.0),
        }
    }
}

/// `UNKNOWN_TOPIC_OR_PARTITION`.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// A Kafka error code by Kafka's name (`UNKNOWN_TOPIC_OR_PARTITION (3)`), as Kafka's `Errors`.
fn error_name(code: i16) -> String {
    use kafka_protocol::error::ResponseError;
    match ResponseError::try_from_code(code) {
        None => "NONE (0)".into(),
        Some(ResponseError::Unknown(c)) => format!("error {c}"),
        Some(e) => {
            let mut name = String::new();
            for (i, c) in format!("{e:?}").chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            format!("{name} ({code})")
        }
    }
}

/// How long a fetchable partition may go without a leader before [`Consumer::poll`] reports it
/// (a warn naming the partitions and Metadata's reason; fetching goes on retrying, as Kafka's
/// consumer does), and how often the report is repeated while it lasts.
pub const NO_LEADER_REPORT_AFTER: Duration = Duration::from_secs(5);
/// See [`NO_LEADER_REPORT_AFTER`].
pub const NO_LEADER_REPORT_EVERY: Duration = Duration::from_secs(30);

/// The consumer. Not thread-safe (`&mut self` everywhere), as Kafka's.
pub struct Consumer {
    config: ConsumerConfig,
    bootstrap: KafkaConnection,
    control: HashMap<i32, KafkaConnection>,
    cluster: Cluster,
    fetcher: Fetcher,
    subscription: Subscription,
    group: Option<Membership>,
    listener: Option<Box<dyn RebalanceListener>>,
    last_auto_commit: Instant,
    last_pattern_check: Option<Instant>,
    /// Fetchable partitions without a leader in Metadata, since when.
    leaderless: HashMap<TopicPartition, Instant>,
    /// When partitions without a leader were last reported.
    leaderless_reported: Option<Instant>,
    closed: bool,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("bootstrap", &self.config.bootstrap_servers)
            .field("group_id", &self.config.group_id)
            .field("subscription", &self.subscription)
            .finish()
    }
}

impl Consumer {
    /// Connects to the first answering `bootstrap.servers` address.
    ///
    /// Errors: [`ConsumerError::Client`] when none answers.
    pub fn new(config: ConsumerConfig) -> Result<Self, ConsumerError> {
        let timeout = Duration::from_millis(config.request_timeout_ms);
        let mut last = None;
        let mut bootstrap = None;
        for addr in config.bootstrap_servers.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            match KafkaConnection::connect(addr, &config.client_id, timeout) {
                Ok(c) => {
                    bootstrap = Some(c);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let bootstrap = match (bootstrap, last) {
            (Some(b), _) => b,
            (None, Some(e)) => return Err(e.into()),
            (None, None) => {
                return Err(ConsumerError::Config {
                    key: "bootstrap.servers".into(),
                    value: config.bootstrap_servers.clone(),
                    reason: "expected at least one host:port that resolves".into(),
                })
            }
        };
        let fetcher = Fetcher::new(FetchSettings {
            client_id: config.client_id.clone(),
            min_bytes: config.fetch_min_bytes,
            max_wait_ms: config.fetch_max_wait_ms,
            max_bytes: config.fetch_max_bytes,
            partition_max_bytes: config.max_partition_fetch_bytes,
            check_crcs: config.check_crcs,
            read_committed: config.read_committed,
            request_timeout: timeout + Duration::from_millis(config.fetch_max_wait_ms.max(0) as u64),
            drain: config.drain_checks(),
        });
        let group = match &config.group_id {
            None => None,
            Some(group_id) => {
                let assignors = config
                    .partition_assignment_strategy
                    .iter()
                    .map(|n| {
                        assignor_by_name(n).ok_or_else(|| ConsumerError::Config {
                            key: "partition.assignment.strategy".into(),
                            value: n.clone(),
                            reason: "expected a known assignor".into(),
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some(Membership::new(
                    GroupSettings {
                        group_id: group_id.clone(),
                        instance_id: config.group_instance_id.clone(),
                        client_id: config.client_id.clone(),
                        session_timeout_ms: config.session_timeout_ms,
                        rebalance_timeout_ms: config.max_poll_interval_ms,
                        heartbeat_interval: Duration::from_millis(config.heartbeat_interval_ms),
                        request_timeout: timeout,
                        assignors,
                        retry_backoff: Duration::from_millis(config.retry_backoff_ms),
                        retry_backoff_max: Duration::from_millis(
                            config.retry_backoff_max_ms.max(config.retry_backoff_ms),
                        ),
                    },
                    Duration::from_millis(config.max_poll_interval_ms.max(0) as u64),
                ))
            }
        };
        Ok(Consumer {
            config,
            bootstrap,
            control: HashMap::new(),
            cluster: Cluster::default(),
            fetcher,
            subscription: Subscription::None,
            group,
            listener: None,
            last_auto_commit: Instant::now(),
            last_pattern_check: None,
            leaderless: HashMap::new(),
            leaderless_reported: None,
            closed: false,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Assigns `partitions` manually (no group rebalancing), replacing any assignment; positions
    /// are initialized at the next poll (committed offset when `group.id` is set, else
    /// `auto.offset.reset`).
    ///
    /// Errors: [`ConsumerError::IllegalState`] when subscribed.
    pub fn assign(&mut self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        if matches!(self.subscription, Subscription::Topics(_) | Subscription::Pattern(_)) {
            return Err(ConsumerError::IllegalState("assign() after subscribe(): unsubscribe first".into()));
        }
        let keep: BTreeSet<&TopicPartition> = partitions.iter().collect();
        let old: Vec<TopicPartition> =
            self.fetcher.partitions.keys().filter(|tp| !keep.contains(tp)).cloned().collect();
        for tp in &old {
            self.fetcher.remove(tp);
        }
        for tp in partitions {
            self.fetcher.add(tp.clone());
        }
        self.subscription = if partitions.is_empty() { Subscription::None } else { Subscription::Assigned };
        let topics: Vec<String> =
            partitions.iter().map(|(t, _)| t.clone()).collect::<BTreeSet<_>>().into_iter().collect();
        if !topics.is_empty() {
            self.refresh_metadata(Some(&topics))?;
        }
        Ok(())
    }

    /// Subscribes to `topics` in the group of `group.id`; partitions come at the next poll.
    ///
    /// Errors: [`ConsumerError::IllegalState`] without `group.id` or after `assign`.
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<(), ConsumerError> {
        self.check_subscribe()?;
        let mut topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        topics.sort();
        topics.dedup();
        self.subscription = Subscription::Topics(topics);
        self.group.as_ref().expect("checked").request_rejoin();
        Ok(())
    }

    /// Subscribes to every topic whose whole name matches `pattern` (a regular expression),
    /// checked against Metadata at each rebalance and at each poll after
    /// `metadata.max.age.ms`-like intervals of 5 s (a new matching topic triggers a rebalance).
    ///
    /// Errors: [`ConsumerError::Config`] for an invalid pattern, and as [`Self::subscribe`].
    pub fn subscribe_pattern(&mut self, pattern: &str) -> Result<(), ConsumerError> {
        self.check_subscribe()?;
        let re = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| ConsumerError::Config {
            key: "pattern".into(),
            value: pattern.into(),
            reason: format!("expected a regular expression: {e}"),
        })?;
        self.subscription = Subscription::Pattern(re);
        self.group.as_ref().expect("checked").request_rejoin();
        Ok(())
    }

    fn check_subscribe(&self) -> Result<(), ConsumerError> {
        if self.group.is_none() {
            return Err(ConsumerError::IllegalState("subscribe() needs group.id".into()));
        }
        if matches!(self.subscription, Subscription::Assigned) {
            return Err(ConsumerError::IllegalState("subscribe() after assign(): unsubscribe first".into()));
        }
        Ok(())
    }

    /// Sets the rebalance listener.
    pub fn set_rebalance_listener(&mut self, listener: Box<dyn RebalanceListener>) {
        self.listener = Some(listener);
    }

    /// Turns `enable.auto.commit` on or off from now on: the timer commits in `poll`, the
    /// commit before a rebalance revokes partitions (Kafka's `ConsumerCoordinator.onJoinPrepare`)
    /// and the one in [`Self::close`]. Used by the harness so the positions of its warmup are
    /// never committed.
    pub fn set_enable_auto_commit(&mut self, on: bool) {
        self.config.enable_auto_commit = on;
    }

    /// The partitions currently assigned, sorted.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.fetcher.partitions.keys().cloned().collect()
    }

    /// The member id in the group (empty when not a member).
    pub fn member_id(&self) -> String {
        self.group.as_ref().map(|g| g.identity().0).unwrap_or_default()
    }

    /// The generation of the group (-1 when not a member).
    pub fn generation(&self) -> i32 {
        self.group.as_ref().map_or(-1, |g| g.identity().1)
    }

    /// Waits up to `timeout` for records and returns at most `max.poll.records` of them. In a
    /// group it first completes any rebalance (which may take longer than `timeout`, as
    /// Kafka's), calling the rebalance listener; while it backs off after a retriable
    /// JoinGroup/SyncGroup error (`retry.backoff.ms`) it returns empty at the timeout and the
    /// next poll goes on. An empty result means none arrived in time.
    ///
    /// Errors: [`ConsumerError::NoOffset`] / [`ConsumerError::OffsetOutOfRange`] under
    /// `auto.offset.reset=none`, [`ConsumerError::Corrupt`], connection and Kafka errors.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        if self.config.fetch_mode == FetchMode::Drain {
            return Err(ConsumerError::IllegalState(
                "poll() with fetchbench.fetch.mode=drain: the records are not decoded, use poll_batches()".into(),
            ));
        }
        self.poll_with(timeout, Fetcher::drain)
    }

    /// As [`Self::poll`] for a consumer with `fetchbench.fetch.mode=drain` ([`drain`]): the
    /// batches of whole fetched partitions, at least `max.poll.records` records when that many
    /// are buffered, each a [`DrainedBatch`] (offsets and record count from its header; no
    /// record decoded). Positions, commits and rebalances are as for `poll`: a batch handed out
    /// moves its partition's position past it.
    ///
    /// Errors: as [`Self::poll`]; [`ConsumerError::IllegalState`] in `decode` mode.
    pub fn poll_batches(&mut self, timeout: Duration) -> Result<Vec<DrainedBatch>, ConsumerError> {
        if self.config.fetch_mode != FetchMode::Drain {
            return Err(ConsumerError::IllegalState(
                "poll_batches() needs fetchbench.fetch.mode=drain; use poll()".into(),
            ));
        }
        self.poll_with(timeout, Fetcher::drain_batches)
    }

    fn poll_with<T>(
        &mut self,
        timeout: Duration,
        take: fn(&mut Fetcher, usize) -> Vec<T>,
    ) -> Result<Vec<T>, ConsumerError> {
        if self.closed {
            return Err(ConsumerError::IllegalState("poll() after close()".into()));
        }
        let deadline = Instant::now() + timeout;
        let max = self.config.max_poll_records;
        let reset_none = self.config.auto_offset_reset == OffsetReset::None;
        loop {
            if let Err(e) = self.coordinate(deadline).and_then(|()| self.update_positions()) {
                // A broken coordinator or broker connection: rediscover and retry until the
                // deadline (Kafka's consumer retries these too); other errors go to the caller.
                let ConsumerError::Client(e) = e else { return Err(e) };
                tracing::warn!("consumer request failed, retrying: {e}");
                if let Some(g) = self.group.as_mut() {
                    g.coordinator_lost();
                }
                self.control.clear();
                // The bootstrap connection (Metadata, FindCoordinator) may be the broken one:
                // reconnect it, as Kafka's NetworkClient picks any reachable node for metadata.
                self.reconnect_bootstrap();
                if Instant::now() >= deadline {
                    return Ok(Vec::new());
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            if self.fetcher.has_chunks() {
                if self.fetcher.buffered() <= max {
                    self.send_fetches()?;
                }
                let out = take(&mut self.fetcher, max);
                if !out.is_empty() {
                    return Ok(out);
                }
            }
            self.send_fetches()?;
            let now = Instant::now();
            // Wake up at least every 100 ms to serve the group (rebalances, auto-commit).
            let until = deadline.min(now + Duration::from_millis(100));
            if self.fetcher.in_flight() {
                // Also at (or past) the deadline: an answer already there is read (Kafka's
                // poll(Duration.ZERO) returns what arrived).
                match self.fetcher.wait(until, reset_none) {
                    Ok(true) if now >= deadline => {
                        if self.fetcher.has_chunks() {
                            return Ok(take(&mut self.fetcher, max));
                        }
                        return Ok(Vec::new());
                    }
                    Ok(_) => {}
                    Err(e) if matches!(e, ConsumerError::Client(_)) => {
                        tracing::warn!("fetch failed, retrying: {e}");
                        self.fetcher.metadata_stale = true;
                        if now >= deadline {
                            return Ok(Vec::new());
                        }
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            } else if now < deadline {
                std::thread::sleep(until - now);
            }
            if now >= deadline {
                return Ok(Vec::new());
            }
        }
    }

    /// Group duties of poll: poll timestamp, async commit answers, auto-commit, rejoin.
    fn coordinate(&mut self, deadline: Instant) -> Result<(), ConsumerError> {
        let stale = self.fetcher.metadata_stale;
        if stale {
            self.fetcher.metadata_stale = false;
            let topics: Vec<String> =
                self.fetcher.partitions.keys().map(|(t, _)| t.clone()).collect::<BTreeSet<_>>().into_iter().collect();
            if !topics.is_empty() {
                self.refresh_metadata(Some(&topics))?;
            }
        }
        if stale || !self.leaderless.is_empty() {
            self.report_leaderless();
        }
        let Some(group) = self.group.as_mut() else { return Ok(()) };
        group.note_poll();
        if let Some(code) = group.fatal() {
            return Err(ConsumerError::Kafka { context: format!("group {}", group.settings.group_id), code });
        }
        group.drain_commits(false)?;
        if self.config.enable_auto_commit
            && self.last_auto_commit.elapsed() >= Duration::from_millis(self.config.auto_commit_interval_ms)
        {
            self.last_auto_commit = Instant::now();
            let offsets = self.positions();
            let group = self.group.as_mut().expect("group");
            if let Err(e) = group.commit(&mut self.bootstrap, &offsets, false) {
                tracing::warn!("auto-commit failed: {e}");
            }
        }
        if matches!(self.subscription, Subscription::Topics(_) | Subscription::Pattern(_)) {
            if let Subscription::Pattern(_) = self.subscription {
                self.check_pattern()?;
            }
            if self.group.as_ref().expect("group").needs_rejoin() {
                self.rebalance(deadline)?;
            }
        }
        Ok(())
    }

    /// Tracks the fetchable partitions (assigned, not paused, with a fetch position) that
    /// Metadata gives no leader, and reports those without one for [`NO_LEADER_REPORT_AFTER`]
    /// at warn, again every [`NO_LEADER_REPORT_EVERY`] while it lasts: a fetch that cannot be
    /// sent never waits in silence.
    fn report_leaderless(&mut self) {
        let now = Instant::now();
        let mut leaderless = HashMap::new();
        for (tp, s) in &self.fetcher.partitions {
            if s.paused || s.fetch_position.is_none() || self.cluster.leaders.contains_key(tp) {
                continue;
            }
            leaderless.insert(tp.clone(), self.leaderless.get(tp).copied().unwrap_or(now));
        }
        self.leaderless = leaderless;
        let mut overdue: Vec<(&TopicPartition, Duration)> = self
            .leaderless
            .iter()
            .map(|(tp, since)| (tp, now.duration_since(*since)))
            .filter(|(_, waited)| *waited >= NO_LEADER_REPORT_AFTER)
            .collect();
        if overdue.is_empty() {
            if self.leaderless.is_empty() {
                self.leaderless_reported = None;
            }
            return;
        }
        if self.leaderless_reported.is_some_and(|t| now.duration_since(t) < NO_LEADER_REPORT_EVERY) {
            return;
        }
        self.leaderless_reported = Some(now);
        overdue.sort();
        let longest = overdue.iter().map(|(_, w)| *w).max().unwrap_or_default();
        let partitions: Vec<String> = overdue
            .iter()
            .map(|(tp, _)| format!("{}-{} ({})", tp.0, tp.1, self.cluster.no_leader_reason(tp)))
            .collect();
        tracing::warn!(
            "no leader for {} for {} s; fetching them waits for Metadata to name one",
            partitions.join(", "),
            longest.as_secs()
        );
    }

    /// Pattern subscriptions: rejoin when the matching topics changed (checked every 5 s).
    fn check_pattern(&mut self) -> Result<(), ConsumerError> {
        // Every 5 s (Kafka waits metadata.max.age.ms, 5 min, by default).
        if self.last_pattern_check.is_some_and(|t| t.elapsed() < Duration::from_secs(5)) {
            return Ok(());
        }
        self.last_pattern_check = Some(Instant::now());
        let before: BTreeSet<String> = self.subscribed_topics().into_iter().collect();
        self.refresh_metadata(None)?;
        let after: BTreeSet<String> = self.subscribed_topics().into_iter().collect();
        if before != after {
            self.group.as_ref().expect("group").request_rejoin();
        }
        Ok(())
    }

    /// Runs `f`; after a connection error (a broker restart broke the bootstrap, coordinator
    /// or a control connection) reconnects and runs it once more, as Kafka's `NetworkClient`
    /// reconnects on the next request.
    fn retry_connection<T>(
        &mut self,
        mut f: impl FnMut(&mut Self) -> Result<T, ConsumerError>,
    ) -> Result<T, ConsumerError> {
        match f(self) {
            Err(ConsumerError::Client(e)) => {
                tracing::warn!("consumer request failed, reconnecting: {e}");
                if let Some(g) = self.group.as_mut() {
                    g.coordinator_lost();
                }
                self.control.clear();
                self.reconnect_bootstrap();
                f(self)
            }
            other => other,
        }
    }

    /// Replaces the bootstrap connection by a new one to the first answering address of
    /// `bootstrap.servers` or of the brokers Metadata named (kept as it is when none answers).
    fn reconnect_bootstrap(&mut self) {
        let mut addrs: Vec<String> = self
            .config
            .bootstrap_servers
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
        addrs.extend(self.cluster.brokers.values().cloned());
        for addr in addrs {
            if let Ok(c) = KafkaConnection::connect(addr.as_str(), &self.config.client_id, self.timeout()) {
                self.bootstrap = c;
                return;
            }
        }
    }

    /// The subscribed topics (a pattern: those of the last Metadata that match).
    fn subscribed_topics(&self) -> Vec<String> {
        match &self.subscription {
            Subscription::Topics(t) => t.clone(),
            Subscription::Pattern(re) => self
                .cluster
                .partition_counts
                .keys()
                .filter(|t| re.is_match(t))
                .filter(|t| !(self.config.exclude_internal_topics && self.cluster.internal.contains(*t)))
                .cloned()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The positions of the assigned partitions that have one: what a commit stores.
    fn positions(&self) -> BTreeMap<TopicPartition, i64> {
        self.fetcher.partitions.iter().filter_map(|(tp, s)| s.position.map(|p| (tp.clone(), p))).collect()
    }

    /// Revokes (eager: everything; cooperative: what moved), joins, syncs and applies the new
    /// assignment, until the group is stable.
    ///
    /// After a retriable error (SyncGroup COORDINATOR_NOT_AVAILABLE, e.g. a coordinator that
    /// cannot write `__consumer_offsets`) it waits `retry.backoff.ms`, doubling up to
    /// `retry.backoff.max.ms`, before rejoining (Kafka's `AbstractCoordinator.joinGroupIfNeeded`);
    /// a wait that would pass `poll_deadline` returns instead (the next poll goes on). When the
    /// attempts have failed for `max.poll.interval.ms` (the rebalance timeout) it gives up: sends
    /// LeaveGroup (a member id held) and returns [`ConsumerError::IllegalState`]. Other errors
    /// of an attempt (JoinGroup giving up, a fatal code) also send LeaveGroup first.
    fn rebalance(&mut self, poll_deadline: Instant) -> Result<(), ConsumerError> {
        loop {
            let group = self.group.as_mut().expect("group");
            if let Some(at) = group.retry_at {
                let now = Instant::now();
                if at > poll_deadline {
                    std::thread::sleep(poll_deadline.saturating_duration_since(now));
                    return Ok(());
                }
                std::thread::sleep(at.saturating_duration_since(now));
                group.retry_at = None;
            }
            if let Err(e) = self.rebalance_once() {
                return Err(self.leave_on_give_up(e));
            }
            let group = self.group.as_mut().expect("group");
            if !group.needs_rejoin() {
                group.reset_backoff();
                return Ok(());
            }
            let give_up = Duration::from_millis(self.config.max_poll_interval_ms.max(0) as u64);
            if group.failing_since.is_some_and(|t| t.elapsed() >= give_up) {
                let e = ConsumerError::IllegalState(format!(
                    "the group {} did not stabilize: rebalances failed for {} ms (max.poll.interval.ms)",
                    group.settings.group_id, self.config.max_poll_interval_ms
                ));
                return Err(self.leave_on_give_up(e));
            }
        }
    }

    /// Sends LeaveGroup when the member has a member id (dynamic members; Kafka's consumer
    /// leaves on close), so the coordinator does not wait `session.timeout.ms` for it, then
    /// returns `e`. Connection errors are returned as they are (poll retries those).
    fn leave_on_give_up(&mut self, e: ConsumerError) -> ConsumerError {
        if matches!(e, ConsumerError::Client(_)) {
            return e;
        }
        let group = self.group.as_mut().expect("group");
        if !group.identity().0.is_empty() {
            if let Err(le) = group.leave(&mut self.bootstrap) {
                tracing::warn!("LeaveGroup after giving up on group {} failed: {le}", group.settings.group_id);
            }
            group.lock_reset_stop();
        }
        e
    }

    /// One rebalance attempt: revoke, join, sync, apply. A retriable SyncGroup error asks for
    /// a rejoin (with a backoff for coordinator errors) and returns `Ok`.
    fn rebalance_once(&mut self) -> Result<(), ConsumerError> {
        let group = self.group.as_mut().expect("group");
        if group.take_lost() && !group.owned.is_empty() {
            let lost = std::mem::take(&mut group.owned);
            tracing::info!("partitions lost: {}", fmt_partitions(&lost));
            for tp in &lost {
                self.fetcher.remove(tp);
            }
            if let Some(l) = self.listener.as_mut() {
                l.on_partitions_lost(&lost);
            }
        }
        let group = self.group.as_mut().expect("group");
        if group.protocol == RebalanceProtocol::Eager && !group.owned.is_empty() {
            let owned = group.owned.clone();
            self.revoke(&owned)?;
            self.group.as_mut().expect("group").owned.clear();
        }
        if let Subscription::Pattern(_) = self.subscription {
            self.refresh_metadata(None)?;
        }
        let topics = self.subscribed_topics();
        let rack = self.config.client_rack.clone();
        let group = self.group.as_mut().expect("group");
        group.ensure_coordinator(&mut self.bootstrap)?;
        let joined = group.join(&mut self.bootstrap, &topics, rack.as_deref())?;
        let assignments = match &joined.leader_members {
            None => BTreeMap::new(),
            Some(members) => {
                let assignor = assignor_by_name(&joined.protocol).ok_or_else(|| {
                    ConsumerError::Protocol(format!("the group chose assignor {:?}, unknown here", joined.protocol))
                })?;
                let mut all_topics: BTreeSet<String> = BTreeSet::new();
                let mut version = 3i16;
                for (_, _, metadata) in members {
                    if metadata.len() >= 2 {
                        version = version.min(i16::from_be_bytes([metadata[0], metadata[1]]).max(0));
                    }
                    if let Ok(sub) = crate::protocol::consumer_protocol::ConsumerSubscription::decode(metadata) {
                        all_topics.extend(sub.topics);
                    }
                }
                let all_topics: Vec<String> = all_topics.into_iter().collect();
                self.refresh_metadata(Some(&all_topics))?;
                let counts: BTreeMap<String, i32> = self
                    .cluster
                    .partition_counts
                    .iter()
                    .filter(|(t, _)| all_topics.contains(t))
                    .map(|(t, n)| (t.clone(), *n))
                    .collect();
                let gm: Vec<GroupMember<'_>> = members
                    .iter()
                    .map(|(m, i, md)| GroupMember { member_id: m, group_instance_id: i.as_deref(), metadata: md })
                    .collect();
                perform_assignment(assignor, &counts, &gm, version)?
            }
        };
        let group = self.group.as_mut().expect("group");
        let bytes = match group.sync(&joined, assignments)? {
            Ok(b) => b,
            Err(code) => {
                group.request_rejoin();
                // Kafka rejoins at once after these; other retriable errors back off.
                if matches!(
                    code,
                    group::codes::REBALANCE_IN_PROGRESS
                        | group::codes::UNKNOWN_MEMBER_ID
                        | group::codes::ILLEGAL_GENERATION
                ) {
                    tracing::info!("SyncGroup of {}: error {code}, rejoining", group.settings.group_id);
                    group.failing_since.get_or_insert_with(Instant::now);
                } else {
                    let wait = group.next_backoff();
                    group.retry_at = Some(Instant::now() + wait);
                    tracing::info!(
                        "SyncGroup of {}: error {code}, rejoining in {} ms",
                        group.settings.group_id,
                        wait.as_millis()
                    );
                }
                return Ok(());
            }
        };
        let new: Vec<TopicPartition> = if bytes.is_empty() {
            Vec::new()
        } else {
            decode_assignment(&bytes).map_err(|e| ConsumerError::Protocol(format!("decoding the assignment: {e}")))?
        };
        let new_set: BTreeSet<TopicPartition> = new.iter().cloned().collect();
        let owned = group.owned.clone();
        let revoked: Vec<TopicPartition> = owned.iter().filter(|tp| !new_set.contains(*tp)).cloned().collect();
        let added: Vec<TopicPartition> =
            new.iter().filter(|tp| !owned.contains(tp)).cloned().collect::<BTreeSet<_>>().into_iter().collect();
        if !revoked.is_empty() {
            self.revoke(&revoked)?;
            // KIP-429: partitions revoked in a cooperative rebalance go to their new owner in
            // a follow-up rebalance.
            self.group.as_ref().expect("group").request_rejoin();
        }
        let group = self.group.as_mut().expect("group");
        group.owned = new_set.iter().cloned().collect();
        group.ever_assigned = true;
        group.set_stable();
        group.reset_backoff();
        tracing::info!(
            "joined group {} generation {} as {}: assigned {}",
            group.settings.group_id,
            joined.generation,
            joined.member_id,
            fmt_partitions(&group.owned)
        );
        for tp in &added {
            self.fetcher.add(tp.clone());
        }
        let topics: Vec<String> = new_set.iter().map(|(t, _)| t.clone()).collect::<BTreeSet<_>>().into_iter().collect();
        if !topics.is_empty() {
            self.refresh_metadata(Some(&topics))?;
        }
        if let Some(l) = self.listener.as_mut() {
            l.on_partitions_assigned(&added);
        }
        Ok(())
    }

    /// Commits (auto-commit) and revokes `partitions`.
    fn revoke(&mut self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        if self.config.enable_auto_commit {
            let offsets: BTreeMap<TopicPartition, i64> =
                self.positions().into_iter().filter(|(tp, _)| partitions.contains(tp)).collect();
            let group = self.group.as_mut().expect("group");
            if let Err(e) = group.commit(&mut self.bootstrap, &offsets, true) {
                tracing::warn!("commit before revocation failed: {e}");
            }
        }
        tracing::info!("partitions revoked: {}", fmt_partitions(partitions));
        if let Some(l) = self.listener.as_mut() {
            l.on_partitions_revoked(partitions);
        }
        for tp in partitions {
            self.fetcher.remove(tp);
        }
        Ok(())
    }

    /// Initializes positions: committed offsets (with `group.id`), then `auto.offset.reset`.
    fn update_positions(&mut self) -> Result<(), ConsumerError> {
        let missing: Vec<TopicPartition> = self
            .fetcher
            .partitions
            .iter()
            .filter(|(_, s)| s.position.is_none() && !s.needs_reset)
            .map(|(tp, _)| tp.clone())
            .collect();
        if !missing.is_empty() {
            let committed = match self.group.as_mut() {
                Some(g) => g.committed(&mut self.bootstrap, &missing)?,
                None => missing.iter().map(|tp| (tp.clone(), None)).collect(),
            };
            for (tp, offset) in committed {
                match offset {
                    Some(o) => self.fetcher.seek(&tp, o),
                    None => {
                        if let Some(s) = self.fetcher.partitions.get_mut(&tp) {
                            s.needs_reset = true;
                        }
                    }
                }
            }
        }
        let reset: Vec<TopicPartition> =
            self.fetcher.partitions.iter().filter(|(_, s)| s.needs_reset).map(|(tp, _)| tp.clone()).collect();
        if reset.is_empty() {
            return Ok(());
        }
        let timestamp = match self.config.auto_offset_reset {
            OffsetReset::Earliest => -2,
            OffsetReset::Latest => -1,
            OffsetReset::None => return Err(ConsumerError::NoOffset { partitions: reset }),
        };
        let offsets = self.list_offsets(&reset, timestamp)?;
        for (tp, offset) in offsets {
            self.fetcher.seek(&tp, offset);
        }
        Ok(())
    }

    /// ListOffsets of `partitions` at `timestamp` (-2 earliest, -1 latest), per leader.
    fn list_offsets(
        &mut self,
        partitions: &[TopicPartition],
        timestamp: i64,
    ) -> Result<BTreeMap<TopicPartition, i64>, ConsumerError> {
        let mut out = BTreeMap::new();
        for attempt in 0..20 {
            let mut by_node: BTreeMap<i32, BTreeMap<&str, Vec<i32>>> = BTreeMap::new();
            let mut stale = false;
            for tp in partitions.iter().filter(|tp| !out.contains_key(*tp)) {
                match self.cluster.leaders.get(tp) {
                    Some(&n) => by_node.entry(n).or_default().entry(tp.0.as_str()).or_default().push(tp.1),
                    None => stale = true,
                }
            }
            let mut retry = stale;
            for (node, topics) in by_node {
                let read_committed = self.config.read_committed;
                let conn = self.control_conn(node)?;
                let version = conn.version(ApiKey::ListOffsets, (1, 7))?;
                let req = ListOffsetsRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_isolation_level(i8::from(read_committed))
                    .with_topics(
                        topics
                            .iter()
                            .map(|(t, ps)| {
                                ListOffsetsTopic::default()
                                    .with_name(TopicName(StrBytes::from_string(t.to_string())))
                                    .with_partitions(
                                        ps.iter()
                                            .map(|&p| {
                                                ListOffsetsPartition::default()
                                                    .with_partition_index(p)
                                                    .with_current_leader_epoch(-1)
                                                    .with_timestamp(timestamp)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    );
                let ResponseKind::ListOffsets(r) =
                    conn.call(ApiKey::ListOffsets, version, RequestKind::ListOffsets(req))?
                else {
                    unreachable!()
                };
                for t in &r.topics {
                    for p in &t.partitions {
                        match p.error_code {
                            0 => {
                                out.insert((t.name.to_string(), p.partition_index), p.offset);
                            }
                            3 | 5 | 6 | 74 | 75 => retry = true,
                            code => {
                                return Err(ConsumerError::Kafka {
                                    context: format!("ListOffsets {}-{}", t.name.as_str(), p.partition_index),
                                    code,
                                })
                            }
                        }
                    }
                }
            }
            if !retry {
                return Ok(out);
            }
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(100));
            }
            let topics: Vec<String> =
                partitions.iter().map(|(t, _)| t.clone()).collect::<BTreeSet<_>>().into_iter().collect();
            self.refresh_metadata(Some(&topics))?;
        }
        let missing: Vec<String> = partitions
            .iter()
            .filter(|tp| !out.contains_key(*tp))
            .map(|tp| format!("{}-{} ({})", tp.0, tp.1, self.cluster.no_leader_reason(tp)))
            .collect();
        Err(ConsumerError::IllegalState(format!("ListOffsets: no leader found for {}", missing.join(", "))))
    }

    /// A connection for requests other than Fetch to `node` (the fetch connection may be busy
    /// with a long poll).
    fn control_conn(&mut self, node: i32) -> Result<&mut KafkaConnection, ConsumerError> {
        if !self.control.contains_key(&node) {
            let addr = self
                .cluster
                .brokers
                .get(&node)
                .ok_or_else(|| ConsumerError::IllegalState(format!("broker {node} unknown to Metadata")))?;
            let conn = if addr.parse::<std::net::SocketAddr>().ok() == Some(self.bootstrap.addr()) {
                KafkaConnection::connect(self.bootstrap.addr(), &self.config.client_id, self.timeout())?
            } else {
                KafkaConnection::connect(addr.as_str(), &self.config.client_id, self.timeout())?
            };
            self.control.insert(node, conn);
        }
        Ok(self.control.get_mut(&node).expect("inserted"))
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }

    fn send_fetches(&mut self) -> Result<(), ConsumerError> {
        match self.fetcher.send_fetches(&self.cluster.leaders, &self.cluster.brokers) {
            Err(ConsumerError::Client(e)) => {
                tracing::warn!("sending a fetch failed, retrying: {e}");
                self.fetcher.metadata_stale = true;
                Ok(())
            }
            other => other,
        }
    }

    /// Metadata of `topics` (`None`: all topics); merges brokers, leaders and partition counts.
    fn refresh_metadata(&mut self, topics: Option<&[String]>) -> Result<(), ConsumerError> {
        let version = self.bootstrap.version(ApiKey::Metadata, (1, 12))?;
        let req = MetadataRequest::default().with_allow_auto_topic_creation(true).with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(t.clone())))))
                .collect()
        }));
        let ResponseKind::Metadata(r) = self.bootstrap.call(ApiKey::Metadata, version, RequestKind::Metadata(req))?
        else {
            unreachable!()
        };
        for b in &r.brokers {
            self.cluster.brokers.insert(b.node_id.0, format!("{}:{}", b.host, b.port));
        }
        if topics.is_none() {
            self.cluster.partition_counts.clear();
            self.cluster.internal.clear();
        }
        for t in &r.topics {
            let Some(name) = &t.name else { continue };
            let name = name.to_string();
            // Internal topics are kept (they can be assigned and read, as in Kafka); only
            // pattern subscriptions leave them out (`exclude.internal.topics`).
            if t.is_internal {
                self.cluster.internal.insert(name.clone());
            } else {
                self.cluster.internal.remove(&name);
            }
            self.cluster.errors.retain(|(topic, _), _| *topic != name);
            if t.error_code != 0 {
                self.cluster.errors.insert((name.clone(), -1), t.error_code);
                self.cluster.partition_counts.remove(&name);
                continue;
            }
            self.cluster.partition_counts.insert(name.clone(), t.partitions.len() as i32);
            for p in &t.partitions {
                if p.error_code != 0 {
                    self.cluster.errors.insert((name.clone(), p.partition_index), p.error_code);
                }
                if p.leader_id.0 >= 0 {
                    self.cluster.leaders.insert((name.clone(), p.partition_index), p.leader_id.0);
                } else {
                    self.cluster.leaders.remove(&(name.clone(), p.partition_index));
                }
            }
        }
        Ok(())
    }

    /// The partition count of `topic` from Metadata (`None` when it does not exist).
    ///
    /// Errors: connection and protocol errors.
    pub fn partition_count(&mut self, topic: &str) -> Result<Option<i32>, ConsumerError> {
        self.retry_connection(|c| c.refresh_metadata(Some(&[topic.to_string()])))?;
        Ok(self.cluster.partition_counts.get(topic).copied())
    }

    fn state(&mut self, tp: &TopicPartition) -> Result<&mut fetcher::PartitionState, ConsumerError> {
        self.fetcher
            .partitions
            .get_mut(tp)
            .ok_or_else(|| ConsumerError::IllegalState(format!("{}-{} is not assigned to this consumer", tp.0, tp.1)))
    }

    /// Sets the position of `tp` to `offset` (the next poll returns records from there).
    ///
    /// Errors: [`ConsumerError::IllegalState`] when `tp` is not assigned.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<(), ConsumerError> {
        self.state(tp)?;
        self.fetcher.seek(tp, offset);
        Ok(())
    }

    /// Moves the positions of `partitions` to their log start offsets (ListOffsets earliest).
    ///
    /// Errors: as [`Self::seek`], and ListOffsets errors.
    pub fn seek_to_beginning(&mut self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        self.seek_to(partitions, -2)
    }

    /// Moves the positions of `partitions` to their log end offsets (ListOffsets latest).
    ///
    /// Errors: as [`Self::seek`], and ListOffsets errors.
    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        self.seek_to(partitions, -1)
    }

    fn seek_to(&mut self, partitions: &[TopicPartition], timestamp: i64) -> Result<(), ConsumerError> {
        for tp in partitions {
            self.state(tp)?;
        }
        for (tp, offset) in self.retry_connection(|c| c.list_offsets(partitions, timestamp))? {
            self.fetcher.seek(&tp, offset);
        }
        Ok(())
    }

    /// The offset of the next record poll returns for `tp`, initializing it (committed offset
    /// or `auto.offset.reset`) when unknown.
    ///
    /// Errors: as [`Self::seek`], [`ConsumerError::NoOffset`].
    pub fn position(&mut self, tp: &TopicPartition) -> Result<i64, ConsumerError> {
        if self.state(tp)?.position.is_none() {
            self.retry_connection(Self::update_positions)?;
        }
        self.state(tp)?
            .position
            .ok_or_else(|| ConsumerError::IllegalState(format!("{}-{} has no position", tp.0, tp.1)))
    }

    /// Whether a Fetch is in flight (diagnostics: right after a `poll` that returned records,
    /// the next Fetch is already out, so fetching overlaps the processing of those records).
    pub fn fetch_in_flight(&self) -> bool {
        self.fetcher.in_flight()
    }

    /// The high watermark of `tp` from the last Fetch response (`None` before one).
    pub fn high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.fetcher.partitions.get(tp).and_then(|s| s.high_watermark)
    }

    /// Where `tp` ends for this consumer, from the last Fetch response (`None` before one):
    /// under `isolation.level=read_committed` the last stable offset (a read_committed consumer
    /// never gets past it: records of a transaction still open are not yet readable), else the
    /// high watermark. Kafka's `SubscriptionState.partitionEndOffset(tp, isolationLevel)`.
    pub fn end_offset(&self, tp: &TopicPartition) -> Option<i64> {
        let state = self.fetcher.partitions.get(tp)?;
        match self.config.read_committed {
            true => state.last_stable_offset.or(state.high_watermark),
            false => state.high_watermark,
        }
    }

    /// Stops fetching `partitions` (poll returns none of their records) until resumed.
    ///
    /// Errors: as [`Self::seek`].
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        for tp in partitions {
            self.state(tp)?;
            self.fetcher.pause(tp);
        }
        Ok(())
    }

    /// Resumes fetching `partitions`.
    ///
    /// Errors: as [`Self::seek`].
    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<(), ConsumerError> {
        for tp in partitions {
            self.state(tp)?.paused = false;
        }
        Ok(())
    }

    /// The paused partitions.
    pub fn paused(&self) -> Vec<TopicPartition> {
        self.fetcher.partitions.iter().filter(|(_, s)| s.paused).map(|(tp, _)| tp.clone()).collect()
    }

    /// Commits the positions of all assigned partitions (the next offsets to read) and waits.
    ///
    /// Errors: [`ConsumerError::IllegalState`] without `group.id`, [`ConsumerError::CommitFailed`].
    pub fn commit_sync(&mut self) -> Result<(), ConsumerError> {
        let offsets = self.positions();
        self.commit_offsets(&offsets, true)
    }

    /// Commits the positions of all assigned partitions without waiting; the answer is read
    /// by a later poll or commit (failures are logged).
    ///
    /// Errors: as [`Self::commit_sync`] for sending.
    pub fn commit_async(&mut self) -> Result<(), ConsumerError> {
        let offsets = self.positions();
        self.commit_offsets(&offsets, false)
    }

    /// Commits explicit offsets (each the next offset to read), waiting when `sync`.
    ///
    /// Errors: as [`Self::commit_sync`].
    pub fn commit_offsets(&mut self, offsets: &BTreeMap<TopicPartition, i64>, sync: bool) -> Result<(), ConsumerError> {
        if self.group.is_none() {
            return Err(ConsumerError::IllegalState("commit needs group.id".into()));
        }
        self.retry_connection(|c| c.group.as_mut().expect("checked").commit(&mut c.bootstrap, offsets, sync))
    }

    /// The committed offsets of `partitions` (`None` where none).
    ///
    /// Errors: [`ConsumerError::IllegalState`] without `group.id`; OffsetFetch errors.
    pub fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<i64>>, ConsumerError> {
        if self.group.is_none() {
            return Err(ConsumerError::IllegalState("committed() needs group.id".into()));
        }
        self.retry_connection(|c| c.group.as_mut().expect("checked").committed(&mut c.bootstrap, partitions))
    }

    /// Closes the consumer: commits the positions when `enable.auto.commit` (in a group),
    /// tells the listener the partitions are revoked, and leaves the group (LeaveGroup; static
    /// members do not leave).
    ///
    /// Errors: the commit's or LeaveGroup's error (the consumer is closed anyway).
    pub fn close(mut self) -> Result<(), ConsumerError> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<(), ConsumerError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let Some(mut group) = self.group.take() else { return Ok(()) };
        let mut result = Ok(());
        let subscribed = matches!(self.subscription, Subscription::Topics(_) | Subscription::Pattern(_));
        if self.config.enable_auto_commit {
            let offsets = self.positions();
            result = group.commit(&mut self.bootstrap, &offsets, true);
        } else {
            result = result.and(group.drain_commits(true));
        }
        if subscribed {
            let owned = std::mem::take(&mut group.owned);
            if !owned.is_empty() {
                if let Some(l) = self.listener.as_mut() {
                    l.on_partitions_revoked(&owned);
                }
            }
            let left = group.leave(&mut self.bootstrap);
            result = result.and(left);
        }
        group.stop_heartbeat();
        result
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // Stops the heartbeat thread (Membership's Drop); no commit, no LeaveGroup: the
        // coordinator expires the member after session.timeout.ms, as for a crashed client.
        self.closed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_follow_kafka() {
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION (3)");
        assert_eq!(error_name(5), "LEADER_NOT_AVAILABLE (5)");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR (-1)");
        assert_eq!(error_name(9999), "error 9999");
    }

    #[test]
    fn no_leader_reasons_name_metadata_errors_and_missing_partitions() {
        let mut c = Cluster::default();
        c.partition_counts.insert("t".into(), 3);
        c.errors.insert(("gone".into(), -1), 3);
        c.errors.insert(("t".into(), 1), 5);
        assert_eq!(c.no_leader_reason(&("t".into(), 7)), "UNKNOWN_TOPIC_OR_PARTITION (3): t has 3 partitions");
        assert_eq!(c.no_leader_reason(&("t".into(), 1)), "Metadata: LEADER_NOT_AVAILABLE (5)");
        assert_eq!(c.no_leader_reason(&("gone".into(), 0)), "Metadata of gone: UNKNOWN_TOPIC_OR_PARTITION (3)");
        assert_eq!(c.no_leader_reason(&("other".into(), 0)), "other not in Metadata");
    }
}
