//! The `sticky` and `cooperative-sticky` assignors (Kafka's `StickyAssignor`,
//! `CooperativeStickyAssignor` and their shared `AbstractStickyAssignor`, KIP-54, KIP-341,
//! KIP-429).
//!
//! Both compute the same target: as balanced as possible (with identical subscriptions the
//! members' loads differ by at most one), and within that, every member keeps as many of the
//! partitions it owned as it can. As in Kafka, two algorithms:
//!
//! * **all subscriptions identical** (`ConstrainedAssignmentBuilder`): with `T` partitions and
//!   `N` members, `min = T / N`, `max = ⌈T / N⌉`, and `T % N` members may hold `max`. Each member
//!   keeps its owned partitions (sorted by partition, then topic) up to its quota (`max` while
//!   fewer than `T % N` members hold `max`, else `min`); the rest of its partitions are revoked.
//!   Unowned and revoked partitions (sorted by topic, then partition) are then dealt round robin
//!   to the members below `min` (sorted by member id), then one each to members at `min` that
//!   may still reach `max`;
//! * **otherwise** (`GeneralAssignmentBuilder`): owned partitions of still-subscribed topics are
//!   kept; the others, topics with the fewest subscribers first, each go to the least loaded
//!   member subscribed to the topic; then partitions are moved from members holding two or more
//!   than another possible owner (to the previous owner of an older generation if there is one,
//!   else to the least loaded possible owner, undoing earlier moves of the same topic when that
//!   keeps things stickier: `PartitionMovements`), until balanced. The rebalanced result is
//!   dropped if it is no better balanced than before the moves (unless starting from scratch).
//!
//! **Ownership claims** (KIP-341): `sticky` is eager, so its members report their previous
//! assignment and generation in the subscription user data ([`StickyUserData`]);
//! `cooperative-sticky` members report them in the protocol's owned partitions and generation
//! (v2+; before v2 the generation is in the user data, [`encode_cooperative_user_data`]). A
//! partition claimed by several members goes to the one with the highest generation (members
//! without a generation count as generation -1); claimed by several members of that highest
//! generation, it belongs to none of them and is assigned as if unowned. Kafka's
//! `allSubscriptionsEqual` does the same, except that when two members of one generation and a
//! third of a higher generation claim a partition its outcome depends on `HashMap` order; here
//! the highest generation always wins. Previous owners for the general algorithm
//! (`prevAssignment`) are the claims of generations below the highest one; such a previous owner
//! only gets a partition back if it still subscribes to the topic.
//!
//! **Cooperative** (KIP-429): after computing the target, `cooperative-sticky` removes every
//! partition that changes owner: a partition validly owned by one member and targeted to
//! another, or claimed by several members of the highest generation, is assigned to nobody in
//! this rebalance. Its owner sees it missing from its assignment, revokes it and rejoins; the
//! follow-up rebalance gives it to its new owner. (Kafka's `CooperativeStickyAssignor` does this
//! with `partitionsTransferringOwnership` in the identical-subscription case and by comparing
//! with the members' raw owned partitions otherwise; here both cases use the resolved owners,
//! so a partition also claimed by a member of an older generation is still held back.)
//!
//! Where Kafka iterates `HashMap`s, members are visited in member id order, and a
//! `PartitionMovements` choice among several partitions takes the lowest partition.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use super::abstract_assignor::{empty_assignment, subscribed_partition_counts};
use super::partition_assignor::{
    flatten, Assignment, Assignor, MemberSubscription, RebalanceProtocol, TopicPartition, DEFAULT_GENERATION,
};
use crate::protocol::consumer_protocol::ConsumerSubscription;
use crate::protocol::primitives::{DecodeError, Reader};

/// The `sticky` assignor (Kafka's `StickyAssignor`, eager). Owned partitions and generation
/// travel in the subscription user data ([`StickyUserData`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StickyAssignor;

/// The `cooperative-sticky` assignor (Kafka's `CooperativeStickyAssignor`: cooperative, and
/// eager). Owned partitions and generation travel in the protocol fields (v1+, v2+), the
/// generation also in the user data ([`encode_cooperative_user_data`]) for older protocol
/// versions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CooperativeStickyAssignor;

impl Assignor for StickyAssignor {
    fn name(&self) -> &'static str {
        "sticky"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> Assignment {
        sticky_assign(partitions_per_topic, subscriptions, false)
    }

    /// `StickyAssignor.subscriptionUserData`: nothing before the first assignment, then the last
    /// assignment and its generation ([`StickyUserData`] v1).
    fn subscription_user_data(&self, last_assignment: Option<&[TopicPartition]>, generation: i32) -> Option<Vec<u8>> {
        last_assignment
            .map(|partitions| StickyUserData { partitions: partitions.to_vec(), generation: Some(generation) }.encode())
    }

    /// `StickyAssignor.memberData`: owned partitions and generation from the user data; none
    /// without user data, none with generation -1 for user data that does not parse.
    fn member_subscription(&self, subscription: &ConsumerSubscription) -> MemberSubscription {
        let (owned_partitions, generation) = match subscription.user_data.as_deref() {
            None | Some([]) => (Vec::new(), None),
            Some(bytes) => match StickyUserData::decode(bytes) {
                Some(data) => (data.partitions, data.generation),
                None => (Vec::new(), Some(DEFAULT_GENERATION)),
            },
        };
        MemberSubscription {
            topics: subscription.topics.clone(),
            owned_partitions,
            generation,
            rack: subscription.rack_id.clone(),
            group_instance_id: None,
        }
    }
}

impl Assignor for CooperativeStickyAssignor {
    fn name(&self) -> &'static str {
        "cooperative-sticky"
    }

    fn supported_protocols(&self) -> &'static [RebalanceProtocol] {
        &[RebalanceProtocol::Cooperative, RebalanceProtocol::Eager]
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> Assignment {
        sticky_assign(partitions_per_topic, subscriptions, true)
    }

    /// `CooperativeStickyAssignor.subscriptionUserData`: the generation, always.
    fn subscription_user_data(&self, _last_assignment: Option<&[TopicPartition]>, generation: i32) -> Option<Vec<u8>> {
        Some(encode_cooperative_user_data(generation))
    }

    /// `CooperativeStickyAssignor.memberData`: the owned partitions of the protocol; the
    /// generation of the protocol (v2+) when there is one, else of the user data (-1 when it does
    /// not parse, none without user data).
    fn member_subscription(&self, subscription: &ConsumerSubscription) -> MemberSubscription {
        let generation = if subscription.generation_id >= 0 {
            Some(subscription.generation_id)
        } else {
            subscription
                .user_data
                .as_deref()
                .map(|bytes| decode_cooperative_user_data(bytes).unwrap_or(DEFAULT_GENERATION))
        };
        MemberSubscription {
            topics: subscription.topics.clone(),
            owned_partitions: flatten(&subscription.owned_partitions),
            generation,
            rack: subscription.rack_id.clone(),
            group_instance_id: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// User data.

/// The `sticky` assignor's subscription user data (`StickyAssignor`'s
/// `STICKY_ASSIGNOR_USER_DATA_V0` / `_V1` schemas, no version prefix):
///
/// ```text
/// previous_assignment: [topic: string (i16 length), partitions: [i32] (i32 count)] (i32 count)
/// generation: i32                                                                   v1 only
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StickyUserData {
    /// The member's previous assignment.
    pub partitions: Vec<TopicPartition>,
    /// Its generation; `None` for the v0 layout (Kafka before 2.3).
    pub generation: Option<i32>,
}

impl StickyUserData {
    /// Encodes with the v1 layout (v0 when `generation` is `None`), partitions grouped by topic
    /// in topic order (Kafka groups them in `HashMap` order), each topic's partitions in order.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (topic, p) in &self.partitions {
            by_topic.entry(topic.as_str()).or_default().push(*p);
        }
        let mut out = Vec::new();
        out.extend_from_slice(&(by_topic.len() as i32).to_be_bytes());
        for (topic, partitions) in by_topic {
            // Topic names are at most 249 bytes in Kafka; longer ones are cut to fit the i16.
            let name = &topic.as_bytes()[..topic.len().min(i16::MAX as usize)];
            out.extend_from_slice(&(name.len() as i16).to_be_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(&(partitions.len() as i32).to_be_bytes());
            for p in partitions {
                out.extend_from_slice(&p.to_be_bytes());
            }
        }
        if let Some(generation) = self.generation {
            out.extend_from_slice(&generation.to_be_bytes());
        }
        out
    }

    /// Decodes as Kafka's `deserializeTopicPartitionAssignment` does: the v1 layout, else the
    /// v0 layout; `None` if neither parses. Bytes after the last field are ignored.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader::unversioned(Self::SCHEMA, bytes);
        let partitions = read_previous_assignment(&mut r).ok()?;
        let generation = r.i32("generation").ok();
        Some(StickyUserData { partitions, generation })
    }

    const SCHEMA: &'static str = "StickyAssignorUserData";
}

/// The previous assignment; a null or negative topic name length is an error.
fn read_previous_assignment(r: &mut Reader<'_>) -> Result<Vec<TopicPartition>, DecodeError> {
    // A topic entry is at least an empty name (2) and an empty partition array (4).
    let topics = r.array_len("previous_assignment", 6)?;
    let mut out = Vec::new();
    for _ in 0..topics {
        // Kafka decodes names leniently (invalid UTF-8 becomes U+FFFD).
        let name = String::from_utf8_lossy(r.string_bytes("topic")?).into_owned();
        let count = r.array_len("partitions", 4)?;
        for _ in 0..count {
            out.push((name.clone(), r.i32("partition")?));
        }
    }
    Ok(out)
}

/// The `cooperative-sticky` assignor's subscription user data
/// (`COOPERATIVE_STICKY_ASSIGNOR_USER_DATA_V0`): the generation as a big-endian `i32`.
pub(crate) fn encode_cooperative_user_data(generation: i32) -> Vec<u8> {
    generation.to_be_bytes().to_vec()
}

/// Decodes [`encode_cooperative_user_data`]'s bytes (`None` if shorter than 4 bytes; bytes
/// after the first 4 are ignored).
pub(crate) fn decode_cooperative_user_data(bytes: &[u8]) -> Option<i32> {
    Reader::unversioned("CooperativeStickyAssignorUserData", bytes).i32("generation").ok()
}

// ---------------------------------------------------------------------------------------------
// The algorithm.

/// A partition: (index of the topic in sorted topic order, partition). Ordering these orders by
/// topic name, then partition.
type Tp = (usize, i32);

/// The input with topics and members replaced by indexes (both in name order).
struct Input<'a> {
    topics: Vec<&'a str>,
    counts: Vec<i32>,
    members: Vec<&'a str>,
    /// Member → subscribed topics that exist (`consumer2AllPotentialTopics`).
    subscribed: Vec<Vec<usize>>,
    /// Member → topic → subscribed.
    subscribes: Vec<Vec<bool>>,
    /// Whether all members subscribe to the same topics (`allSubscriptionsEqual`).
    all_equal: bool,
    /// Member → the partitions it validly owns (`consumerToOwnedPartitions`).
    owned: Vec<Vec<Tp>>,
    /// Partition → its valid owner.
    valid_owner: HashMap<Tp, usize>,
    /// Partitions claimed by several members of the highest generation claiming them
    /// (`partitionsWithMultiplePreviousOwners`).
    multi_owned: HashSet<Tp>,
    /// Partition → previous owner of an older generation (`prevAssignment`).
    prev: HashMap<Tp, usize>,
}

impl<'a> Input<'a> {
    fn new(
        partitions_per_topic: &'a BTreeMap<String, i32>,
        subscriptions: &'a BTreeMap<String, MemberSubscription>,
    ) -> Self {
        let counts_by_name = subscribed_partition_counts(partitions_per_topic, subscriptions);
        let topics: Vec<&str> = counts_by_name.keys().copied().collect();
        let counts: Vec<i32> = counts_by_name.values().copied().collect();
        let topic_index: HashMap<&str, usize> = topics.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let members: Vec<&str> = subscriptions.keys().map(String::as_str).collect();
        let subs: Vec<&MemberSubscription> = subscriptions.values().collect();

        let raw_topics: Vec<BTreeSet<&str>> =
            subs.iter().map(|s| s.topics.iter().map(String::as_str).collect()).collect();
        let all_equal = raw_topics.windows(2).all(|w| w[0] == w[1]);
        let subscribed: Vec<Vec<usize>> =
            raw_topics.iter().map(|ts| ts.iter().filter_map(|t| topic_index.get(t).copied()).collect()).collect();
        let subscribes: Vec<Vec<bool>> = subscribed
            .iter()
            .map(|ts| {
                let mut v = vec![false; topics.len()];
                for &t in ts {
                    v[t] = true;
                }
                v
            })
            .collect();

        // Every member's claims on existing partitions, deduplicated.
        let claims_of: Vec<Vec<Tp>> = subs
            .iter()
            .map(|s| {
                let mut seen = HashSet::new();
                s.owned_partitions
                    .iter()
                    .filter_map(|(t, p)| {
                        let t = *topic_index.get(t.as_str())?;
                        (*p >= 0 && *p < counts[t] && seen.insert((t, *p))).then_some((t, *p))
                    })
                    .collect()
            })
            .collect();
        let generation_of: Vec<i32> = subs.iter().map(|s| s.generation.unwrap_or(DEFAULT_GENERATION)).collect();
        let max_generation = generation_of.iter().copied().max().unwrap_or(DEFAULT_GENERATION).max(DEFAULT_GENERATION);

        let mut claims: BTreeMap<Tp, Vec<usize>> = BTreeMap::new();
        for (m, tps) in claims_of.iter().enumerate() {
            for &tp in tps {
                claims.entry(tp).or_default().push(m);
            }
        }
        let mut valid_owner = HashMap::new();
        let mut multi_owned = HashSet::new();
        for (tp, claimants) in &claims {
            let top = claimants.iter().map(|&m| generation_of[m]).max().expect("claims are not empty");
            let mut winners = claimants.iter().filter(|&&m| generation_of[m] == top);
            match (winners.next(), winners.next()) {
                (Some(&m), None) => {
                    valid_owner.insert(*tp, m);
                }
                _ => {
                    multi_owned.insert(*tp);
                }
            }
        }
        let owned: Vec<Vec<Tp>> = claims_of
            .iter()
            .enumerate()
            .map(|(m, tps)| tps.iter().copied().filter(|tp| valid_owner.get(tp) == Some(&m)).collect())
            .collect();

        // prevAssignment: claims of members below the highest generation, the highest such
        // generation winning (the first member in id order on a tie).
        let mut prev: HashMap<Tp, (usize, i32)> = HashMap::new();
        for (m, tps) in claims_of.iter().enumerate() {
            let generation = generation_of[m];
            if generation >= max_generation {
                continue;
            }
            for &tp in tps {
                match prev.get(&tp) {
                    Some(&(_, g)) if g >= generation => {}
                    _ => {
                        prev.insert(tp, (m, generation));
                    }
                }
            }
        }
        let prev = prev.into_iter().map(|(tp, (m, _))| (tp, m)).collect();

        Input { topics, counts, members, subscribed, subscribes, all_equal, owned, valid_owner, multi_owned, prev }
    }

    fn all_partitions(&self) -> impl Iterator<Item = Tp> + '_ {
        self.counts.iter().enumerate().flat_map(|(t, &n)| (0..n).map(move |p| (t, p)))
    }
}

fn sticky_assign(
    partitions_per_topic: &BTreeMap<String, i32>,
    subscriptions: &BTreeMap<String, MemberSubscription>,
    cooperative: bool,
) -> Assignment {
    let mut out = empty_assignment(subscriptions);
    if subscriptions.is_empty() {
        return out;
    }
    let input = Input::new(partitions_per_topic, subscriptions);
    let mut assignment = if input.all_equal { constrained_assign(&input) } else { General::new(&input).build() };
    if cooperative {
        // adjustAssignment: hold back every partition changing owner.
        for (m, tps) in assignment.iter_mut().enumerate() {
            tps.retain(|tp| {
                !input.multi_owned.contains(tp) && input.valid_owner.get(tp).is_none_or(|&owner| owner == m)
            });
        }
    }
    for (m, mut tps) in assignment.into_iter().enumerate() {
        tps.sort_unstable();
        let target = out.get_mut(input.members[m]).expect("every member is in the assignment");
        target.extend(tps.into_iter().map(|(t, p)| (input.topics[t].to_string(), p)));
    }
    out
}

/// `ConstrainedAssignmentBuilder` (identical subscriptions), without racks.
fn constrained_assign(input: &Input<'_>) -> Vec<Vec<Tp>> {
    let n = input.members.len();
    let total: usize = input.counts.iter().map(|&c| c as usize).sum();
    let min_quota = total / n;
    let max_quota = total.div_ceil(n);
    let expected_over_min = total % n;
    let mut current_over_min = 0usize;

    let mut assignment: Vec<Vec<Tp>> = vec![Vec::new(); n];
    let mut assigned: HashSet<Tp> = HashSet::new();
    let mut under_min: Vec<usize> = Vec::new();
    let mut exactly_min: VecDeque<usize> = VecDeque::new();

    // assignOwnedPartitions
    for (m, owned) in input.owned.iter().enumerate() {
        let mut owned = owned.clone();
        owned.sort_unstable_by_key(|&(t, p)| (p, t));
        let keep = if owned.len() < min_quota {
            under_min.push(m);
            owned.len()
        } else if owned.len() >= max_quota && current_over_min < expected_over_min {
            current_over_min += 1;
            if current_over_min == expected_over_min {
                exactly_min.clear();
            }
            max_quota
        } else {
            if current_over_min < expected_over_min {
                exactly_min.push_back(m);
            }
            min_quota
        };
        // The rest is revoked: it is not `assigned`, so it is dealt below.
        assigned.extend(owned[..keep].iter().copied());
        assignment[m].extend_from_slice(&owned[..keep]);
    }

    let unassigned: Vec<Tp> = input.all_partitions().filter(|tp| !assigned.contains(tp)).collect();
    under_min.sort_unstable();
    exactly_min.make_contiguous().sort_unstable();

    // assignRoundRobin: `cursor` plays Java's iterator over `under_min`.
    let mut cursor = 0usize;
    for tp in unassigned {
        let (m, from_under) = if cursor < under_min.len() {
            cursor += 1;
            (under_min[cursor - 1], true)
        } else if !under_min.is_empty() {
            cursor = 1;
            (under_min[0], true)
        } else if let Some(m) = exactly_min.pop_front() {
            (m, false)
        } else {
            // Kafka throws ("No more unfilled consumers to be assigned"); the quotas make this
            // unreachable. Give the partition to a least loaded member rather than lose it.
            debug_assert!(false, "no unfilled member left for {tp:?}");
            ((0..n).min_by_key(|&m| assignment[m].len()).expect("members"), false)
        };
        assignment[m].push(tp);
        let count = assignment[m].len();
        if count == min_quota {
            if from_under {
                cursor -= 1;
                under_min.remove(cursor);
            }
            exactly_min.push_back(m);
        }
        // (Kafka also counts members reaching `max_quota` here, only to log inconsistencies.)
    }
    assignment
}

/// `AbstractStickyAssignor.PartitionMovements`: the moves made so far, to prefer undoing a
/// move of the same topic over making a new one (stickiness).
#[derive(Default)]
struct PartitionMovements {
    /// Topic → (from, to) → partitions that moved so.
    by_topic: HashMap<usize, BTreeMap<(usize, usize), BTreeSet<i32>>>,
    /// Partition → (original owner, current owner).
    moves: HashMap<Tp, (usize, usize)>,
}

impl PartitionMovements {
    fn remove_record(&mut self, tp: Tp) -> Option<(usize, usize)> {
        let pair = self.moves.remove(&tp)?;
        if let Some(for_topic) = self.by_topic.get_mut(&tp.0) {
            if let Some(set) = for_topic.get_mut(&pair) {
                set.remove(&tp.1);
                if set.is_empty() {
                    for_topic.remove(&pair);
                }
            }
            if for_topic.is_empty() {
                self.by_topic.remove(&tp.0);
            }
        }
        Some(pair)
    }

    fn add_record(&mut self, tp: Tp, pair: (usize, usize)) {
        self.moves.insert(tp, pair);
        self.by_topic.entry(tp.0).or_default().entry(pair).or_default().insert(tp.1);
    }

    fn move_partition(&mut self, tp: Tp, old: usize, new: usize) {
        match self.remove_record(tp) {
            Some((src, _)) => {
                if src != new {
                    self.add_record(tp, (src, new));
                }
            }
            None => self.add_record(tp, (old, new)),
        }
    }

    fn actual_partition_to_move(&self, tp: Tp, old: usize, new: usize) -> Tp {
        let Some(for_topic) = self.by_topic.get(&tp.0) else { return tp };
        let old = self.moves.get(&tp).map_or(old, |&(src, _)| src);
        match for_topic.get(&(new, old)).and_then(|set| set.first()) {
            Some(&p) => (tp.0, p),
            None => tp,
        }
    }
}

/// `GeneralAssignmentBuilder` (different subscriptions), without racks.
struct General<'a> {
    input: &'a Input<'a>,
    /// Topic → subscribed members (`topic2AllPotentialConsumers`).
    topic_members: Vec<Vec<usize>>,
    /// Member → how many partitions its topics have.
    max_size: Vec<usize>,
    assignment: Vec<Vec<Tp>>,
    /// Members that cannot take part in reassignment (removed from `currentAssignment`).
    fixed: Vec<bool>,
    /// `currentPartitionConsumer`.
    owner: HashMap<Tp, usize>,
    /// `sortedCurrentSubscriptions`: (load, member).
    sorted: BTreeSet<(usize, usize)>,
    movements: PartitionMovements,
}

impl<'a> General<'a> {
    fn new(input: &'a Input<'a>) -> Self {
        let n = input.members.len();
        let mut topic_members = vec![Vec::new(); input.topics.len()];
        for (m, topics) in input.subscribed.iter().enumerate() {
            for &t in topics {
                topic_members[t].push(m);
            }
        }
        let max_size = input.subscribed.iter().map(|ts| ts.iter().map(|&t| input.counts[t] as usize).sum()).collect();
        General {
            input,
            topic_members,
            max_size,
            assignment: vec![Vec::new(); n],
            fixed: vec![false; n],
            owner: HashMap::new(),
            sorted: BTreeSet::new(),
            movements: PartitionMovements::default(),
        }
    }

    fn build(mut self) -> Vec<Vec<Tp>> {
        let input = self.input;
        // assignOwnedPartitions: keep owned partitions of topics still subscribed.
        let mut revocation_required = false;
        for (m, owned) in input.owned.iter().enumerate() {
            for &tp in owned {
                if input.subscribes[m][tp.0] {
                    self.assignment[m].push(tp);
                    self.owner.insert(tp, m);
                } else {
                    revocation_required = true;
                }
            }
        }
        // Topics with the fewest possible owners first, then by name.
        let mut sorted_topics: Vec<usize> = (0..input.topics.len()).collect();
        sorted_topics.sort_by_key(|&t| (self.topic_members[t].len(), t));
        let sorted_all: Vec<Tp> =
            sorted_topics.iter().flat_map(|&t| (0..input.counts[t]).map(move |p| (t, p))).collect();
        let unassigned: Vec<Tp> = sorted_all.iter().copied().filter(|tp| !self.owner.contains_key(tp)).collect();
        self.sorted = (0..input.members.len()).map(|m| (self.assignment[m].len(), m)).collect();
        self.balance(sorted_all, unassigned, revocation_required);
        self.assignment
    }

    fn load(&self, m: usize) -> usize {
        self.assignment[m].len()
    }

    fn balance(&mut self, sorted_all: Vec<Tp>, unassigned: Vec<Tp>, revocation_required: bool) {
        let initializing = self.sorted.last().is_none_or(|&(load, _)| load == 0);

        // Assign every unassigned partition to its least loaded possible owner.
        for &tp in &unassigned {
            if let Some(&(load, m)) = self.sorted.iter().find(|&&(_, m)| self.input.subscribes[m][tp.0]) {
                self.sorted.remove(&(load, m));
                self.assignment[m].push(tp);
                self.owner.insert(tp, m);
                self.sorted.insert((load + 1, m));
            }
        }

        // Only partitions with two or more possible owners can move.
        let movable = |tp: &Tp| self.topic_members[tp.0].len() >= 2;
        let sorted_all: Vec<Tp> = sorted_all.into_iter().filter(movable).collect();
        let unassigned: Vec<Tp> = unassigned.into_iter().filter(movable).collect();

        // Only members that could gain or lose a partition take part.
        for m in 0..self.input.members.len() {
            if !self.can_participate(m) {
                self.sorted.remove(&(self.load(m), m));
                self.fixed[m] = true;
            }
        }

        let pre_balance = self.assignment.clone();
        let pre_balance_owner = self.owner.clone();
        let pre_balance_score = self.balance_score();

        // Without revocations due to subscription changes, first try moving only new partitions.
        if !revocation_required {
            self.perform_reassignments(&unassigned);
        }
        let reassigned = self.perform_reassignments(&sorted_all);

        if !initializing && reassigned && self.balance_score() >= pre_balance_score {
            self.assignment = pre_balance;
            self.owner = pre_balance_owner;
        }
    }

    fn can_participate(&self, m: usize) -> bool {
        self.load(m) < self.max_size[m] || self.assignment[m].iter().any(|tp| self.topic_members[tp.0].len() >= 2)
    }

    /// Sum over pairs of participating members of the difference of their loads.
    fn balance_score(&self) -> usize {
        let mut loads: Vec<usize> =
            (0..self.assignment.len()).filter(|&m| !self.fixed[m]).map(|m| self.load(m)).collect();
        loads.sort_unstable();
        // Σ_{i<j} (l_j - l_i) = Σ_j l_j * (2j - (n - 1)).
        let n = loads.len() as i64;
        let score: i64 = loads.iter().enumerate().map(|(j, &l)| l as i64 * (2 * j as i64 - (n - 1))).sum();
        score as usize
    }

    fn is_balanced(&self) -> bool {
        let (Some(&(min, _)), Some(&(max, _))) = (self.sorted.first(), self.sorted.last()) else { return true };
        if min + 1 >= max {
            return true;
        }
        for &(load, m) in &self.sorted {
            if load == self.max_size[m] {
                continue;
            }
            for &t in &self.input.subscribed[m] {
                for p in 0..self.input.counts[t] {
                    if let Some(&other) = self.owner.get(&(t, p)) {
                        if other != m && load + 1 < self.load(other) {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    fn perform_reassignments(&mut self, partitions: &[Tp]) -> bool {
        // Kafka loops until a pass moves nothing; the bound only guards against cycling.
        let max_passes = 4 * (partitions.len() + self.input.members.len()) + 16;
        let mut reassigned = false;
        for _ in 0..max_passes {
            let mut modified = false;
            for &tp in partitions {
                if self.is_balanced() {
                    break;
                }
                let Some(&owner) = self.owner.get(&tp) else { continue };
                if let Some(&prev) = self.input.prev.get(&tp) {
                    let eligible = prev != owner && self.input.subscribes[prev][tp.0] && !self.fixed[prev];
                    if eligible && self.load(owner) > self.load(prev) + 1 {
                        self.reassign(tp, prev);
                        reassigned = true;
                        modified = true;
                        continue;
                    }
                }
                let owner_load = self.load(owner);
                if self.topic_members[tp.0].iter().any(|&other| owner_load > self.load(other) + 1) {
                    // The least loaded participating member subscribed to the topic.
                    let new = self.sorted.iter().map(|&(_, m)| m).find(|&m| self.input.subscribes[m][tp.0]);
                    if let Some(new) = new.filter(|&new| new != owner) {
                        self.reassign(tp, new);
                        reassigned = true;
                        modified = true;
                    }
                }
            }
            if !modified {
                break;
            }
        }
        reassigned
    }

    fn reassign(&mut self, tp: Tp, new: usize) {
        let old = self.owner[&tp];
        let actual = self.movements.actual_partition_to_move(tp, old, new);
        self.process_partition_movement(actual, new);
    }

    fn process_partition_movement(&mut self, tp: Tp, new: usize) {
        let old = self.owner[&tp];
        self.sorted.remove(&(self.load(old), old));
        self.sorted.remove(&(self.load(new), new));
        self.movements.move_partition(tp, old, new);
        self.assignment[old].retain(|x| *x != tp);
        self.assignment[new].push(tp);
        self.owner.insert(tp, new);
        self.sorted.insert((self.load(new), new));
        self.sorted.insert((self.load(old), old));
    }
}
