use std::collections::{BTreeMap, BTreeSet, HashMap};

use proptest::prelude::*;

use super::partition_assignor::{Assignment, MemberSubscription, DEFAULT_GENERATION};
use super::sticky::{decode_cooperative_user_data, encode_cooperative_user_data, StickyUserData};
use super::subscription::{build_assignment, decode_member_subscription};
use super::*;
use crate::protocol::consumer_protocol::ConsumerSubscription;

fn topics(spec: &[(&str, i32)]) -> BTreeMap<String, i32> {
    spec.iter().map(|(t, n)| (t.to_string(), *n)).collect()
}

fn members(spec: &[(&str, MemberSubscription)]) -> BTreeMap<String, MemberSubscription> {
    spec.iter().map(|(m, s)| (m.to_string(), s.clone())).collect()
}

fn tps(topic: &str, partitions: impl IntoIterator<Item = i32>) -> Vec<TopicPartition> {
    partitions.into_iter().map(|p| (topic.to_string(), p)).collect()
}

fn concat(parts: &[Vec<TopicPartition>]) -> Vec<TopicPartition> {
    let mut v: Vec<TopicPartition> = parts.concat();
    v.sort();
    v
}

fn three_on_t12() -> (BTreeMap<String, i32>, BTreeMap<String, MemberSubscription>) {
    let sub = MemberSubscription::new(["t"]);
    (topics(&[("t", 12)]), members(&[("c1", sub.clone()), ("c2", sub.clone()), ("c3", sub)]))
}

// ---------------------------------------------------------------------------------------------
// Worked examples.

#[test]
fn range_twelve_partitions_three_members() {
    let (ppt, subs) = three_on_t12();
    let a = RangeAssignor.assign(&ppt, &subs);
    assert_eq!(a["c1"], tps("t", 0..4));
    assert_eq!(a["c2"], tps("t", 4..8));
    assert_eq!(a["c3"], tps("t", 8..12));
}

#[test]
fn range_kafka_javadoc_example() {
    // RangeAssignor's javadoc: C0 = t0p0 t0p1 t1p0 t1p1, C1 = t0p2 t1p2.
    let sub = MemberSubscription::new(["t0", "t1"]);
    let a = RangeAssignor.assign(&topics(&[("t0", 3), ("t1", 3)]), &members(&[("C0", sub.clone()), ("C1", sub)]));
    assert_eq!(a["C0"], concat(&[tps("t0", 0..2), tps("t1", 0..2)]));
    assert_eq!(a["C1"], concat(&[tps("t0", [2]), tps("t1", [2])]));
}

#[test]
fn range_orders_static_members_first() {
    // MemberInfo: members with a group.instance.id first (by it), then by member id.
    let sub = MemberSubscription::new(["t"]);
    let subs = members(&[
        ("a", sub.clone()),
        ("b", sub.clone().with_group_instance_id("i2")),
        ("c", sub.with_group_instance_id("i1")),
    ]);
    let a = RangeAssignor.assign(&topics(&[("t", 3)]), &subs);
    assert_eq!((a["c"].clone(), a["b"].clone(), a["a"].clone()), (tps("t", [0]), tps("t", [1]), tps("t", [2])));
}

#[test]
fn roundrobin_twelve_partitions_three_members() {
    let (ppt, subs) = three_on_t12();
    let a = RoundRobinAssignor.assign(&ppt, &subs);
    assert_eq!(a["c1"], tps("t", [0, 3, 6, 9]));
    assert_eq!(a["c2"], tps("t", [1, 4, 7, 10]));
    assert_eq!(a["c3"], tps("t", [2, 5, 8, 11]));
}

fn javadoc_unequal() -> (BTreeMap<String, i32>, BTreeMap<String, MemberSubscription>) {
    let ppt = topics(&[("t0", 1), ("t1", 2), ("t2", 3)]);
    let subs = members(&[
        ("C0", MemberSubscription::new(["t0"])),
        ("C1", MemberSubscription::new(["t0", "t1"])),
        ("C2", MemberSubscription::new(["t0", "t1", "t2"])),
    ]);
    (ppt, subs)
}

#[test]
fn roundrobin_kafka_javadoc_unequal_subscriptions() {
    let (ppt, subs) = javadoc_unequal();
    let a = RoundRobinAssignor.assign(&ppt, &subs);
    assert_eq!(a["C0"], tps("t0", [0]));
    assert_eq!(a["C1"], tps("t1", [0]));
    assert_eq!(a["C2"], concat(&[tps("t1", [1]), tps("t2", 0..3)]));
}

#[test]
fn sticky_fresh_is_round_robin_like() {
    let (ppt, subs) = three_on_t12();
    for assignor in [&StickyAssignor as &dyn Assignor, &CooperativeStickyAssignor] {
        let a = assignor.assign(&ppt, &subs);
        assert_eq!(a["c1"], tps("t", [0, 3, 6, 9]));
        assert_eq!(a["c2"], tps("t", [1, 4, 7, 10]));
        assert_eq!(a["c3"], tps("t", [2, 5, 8, 11]));
    }
}

#[test]
fn sticky_member_leaves_range_example() {
    // c1 = 0-3, c2 = 4-7, c3 = 8-11 (the range example); c1 leaves.
    let ppt = topics(&[("t", 12)]);
    let subs = members(&[
        ("c2", MemberSubscription::new(["t"]).with_owned(tps("t", 4..8)).with_generation(1)),
        ("c3", MemberSubscription::new(["t"]).with_owned(tps("t", 8..12)).with_generation(1)),
    ]);
    for assignor in [&StickyAssignor as &dyn Assignor, &CooperativeStickyAssignor] {
        let a = assignor.assign(&ppt, &subs);
        assert_eq!(a["c2"], concat(&[tps("t", [0, 2]), tps("t", 4..8)]));
        assert_eq!(a["c3"], concat(&[tps("t", [1, 3]), tps("t", 8..12)]));
    }
}

#[test]
fn sticky_kafka_javadoc_example_1() {
    // StickyAssignor's javadoc, example 1: same as round robin at first; after C1 leaves, C0
    // and C2 keep everything they had.
    let ppt = topics(&[("t0", 2), ("t1", 2), ("t2", 2), ("t3", 2)]);
    let sub = MemberSubscription::new(["t0", "t1", "t2", "t3"]);
    let subs = members(&[("C0", sub.clone()), ("C1", sub.clone()), ("C2", sub.clone())]);
    let a = StickyAssignor.assign(&ppt, &subs);
    assert_eq!(a["C0"], concat(&[tps("t0", [0]), tps("t1", [1]), tps("t3", [0])]));
    assert_eq!(a["C1"], concat(&[tps("t0", [1]), tps("t2", [0]), tps("t3", [1])]));
    assert_eq!(a["C2"], concat(&[tps("t1", [0]), tps("t2", [1])]));
    let next = members(&[
        ("C0", sub.clone().with_owned(a["C0"].clone()).with_generation(1)),
        ("C2", sub.with_owned(a["C2"].clone()).with_generation(1)),
    ]);
    let b = StickyAssignor.assign(&ppt, &next);
    assert_eq!(b["C0"].len(), 4);
    assert_eq!(b["C2"].len(), 4);
    assert!(a["C0"].iter().all(|tp| b["C0"].contains(tp)));
    assert!(a["C2"].iter().all(|tp| b["C2"].contains(tp)));
}

#[test]
fn sticky_kafka_javadoc_example_2() {
    // Unequal subscriptions: C0 = t0p0, C1 = t1p0 t1p1, C2 = t2p0..2; after C0 leaves, C1 takes
    // t0p0 and nothing else moves.
    let (ppt, subs) = javadoc_unequal();
    let a = StickyAssignor.assign(&ppt, &subs);
    assert_eq!(a["C0"], tps("t0", [0]));
    assert_eq!(a["C1"], tps("t1", 0..2));
    assert_eq!(a["C2"], tps("t2", 0..3));
    let mut next = subs.clone();
    next.remove("C0");
    for (m, s) in next.iter_mut() {
        s.owned_partitions = a[m].clone();
        s.generation = Some(1);
    }
    let b = StickyAssignor.assign(&ppt, &next);
    assert_eq!(b["C1"], concat(&[tps("t0", [0]), tps("t1", 0..2)]));
    assert_eq!(b["C2"], tps("t2", 0..3));
}

#[test]
fn sticky_highest_generation_wins_a_conflict() {
    // c1 (generation 3) and c2 (generation 2, stale) both claim t0: c1 keeps it.
    let ppt = topics(&[("t", 2)]);
    let subs = members(&[
        ("c1", MemberSubscription::new(["t"]).with_owned(tps("t", [0])).with_generation(3)),
        ("c2", MemberSubscription::new(["t"]).with_owned(tps("t", [0, 1])).with_generation(2)),
    ]);
    for assignor in [&StickyAssignor as &dyn Assignor, &CooperativeStickyAssignor] {
        let a = assignor.assign(&ppt, &subs);
        assert_eq!(a["c1"], tps("t", [0]));
        assert_eq!(a["c2"], tps("t", [1]));
    }
    // Reversed generations: c2 keeps both claims' partitions, c1 must wait (cooperative) for t0.
    let subs = members(&[
        ("c1", MemberSubscription::new(["t"]).with_owned(tps("t", [0])).with_generation(2)),
        ("c2", MemberSubscription::new(["t"]).with_owned(tps("t", [0, 1])).with_generation(3)),
    ]);
    let eager = StickyAssignor.assign(&ppt, &subs);
    assert_eq!(eager["c1"].len() + eager["c2"].len(), 2);
    assert_eq!(eager["c1"].len(), 1);
    let coop = CooperativeStickyAssignor.assign(&ppt, &subs);
    // Target: one each; c2 owned both at the highest generation, so the one it gives up is
    // held back this round.
    assert_eq!(coop["c1"], Vec::<TopicPartition>::new());
    assert_eq!(coop["c2"].len(), 1);
}

#[test]
fn sticky_same_generation_double_claim_owned_by_nobody() {
    let ppt = topics(&[("t", 2)]);
    let subs = members(&[
        ("c1", MemberSubscription::new(["t"]).with_owned(tps("t", [0])).with_generation(5)),
        ("c2", MemberSubscription::new(["t"]).with_owned(tps("t", [0, 1])).with_generation(5)),
    ]);
    let eager = StickyAssignor.assign(&ppt, &subs);
    assert_eq!(eager["c2"], tps("t", [1]));
    assert_eq!(eager["c1"], tps("t", [0]));
    // Cooperative: the doubly claimed partition goes to nobody until both have revoked it.
    let coop = CooperativeStickyAssignor.assign(&ppt, &subs);
    assert_eq!(coop["c2"], tps("t", [1]));
    assert_eq!(coop["c1"], Vec::<TopicPartition>::new());
}

#[test]
fn cooperative_member_joins_two_phases() {
    // c1 = 0-3, c2 = 4-7, c3 = 8-11 (generation 1); c4 joins.
    let ppt = topics(&[("t", 12)]);
    let mut subs = BTreeMap::new();
    for (m, range) in [("c1", 0..4), ("c2", 4..8), ("c3", 8..12)] {
        subs.insert(m.to_string(), MemberSubscription::new(["t"]).with_owned(tps("t", range)).with_generation(1));
    }
    subs.insert("c4".to_string(), MemberSubscription::new(["t"]));
    // The eager target: each keeps three, c4 gets the three revoked.
    let target = StickyAssignor.assign(&ppt, &subs);
    assert_eq!(target["c1"], tps("t", 0..3));
    assert_eq!(target["c4"], tps("t", [3, 7, 11]));
    // Cooperative, first rebalance: revocations only.
    let first = CooperativeStickyAssignor.assign(&ppt, &subs);
    assert_eq!(first["c1"], tps("t", 0..3));
    assert_eq!(first["c2"], tps("t", 4..7));
    assert_eq!(first["c3"], tps("t", 8..11));
    assert_eq!(first["c4"], Vec::<TopicPartition>::new());
    // Second rebalance (generation 2), owners having revoked: c4 gets them.
    let next: BTreeMap<String, MemberSubscription> = first
        .iter()
        .map(|(m, owned)| (m.clone(), MemberSubscription::new(["t"]).with_owned(owned.clone()).with_generation(2)))
        .collect();
    let second = CooperativeStickyAssignor.assign(&ppt, &next);
    assert_eq!(second, target);
}

#[test]
fn more_members_than_partitions_and_empty_topics() {
    let ppt = topics(&[("t", 2), ("empty", 0)]);
    let sub = MemberSubscription::new(["t", "empty", "missing"]);
    let subs: BTreeMap<String, MemberSubscription> = (0..5).map(|i| (format!("m{i}"), sub.clone())).collect();
    for name in ASSIGNOR_NAMES {
        let a = assignor_by_name(name).unwrap().assign(&ppt, &subs);
        assert_eq!(a.len(), 5, "{name}");
        assert_eq!(a.values().map(Vec::len).sum::<usize>(), 2, "{name}");
        assert!(a.values().all(|v| v.len() <= 1), "{name}");
    }
}

#[test]
fn unsubscribed_topics_are_not_assigned() {
    let ppt = topics(&[("a", 3), ("b", 3), ("c", 3)]);
    let subs = members(&[("m1", MemberSubscription::new(["a"])), ("m2", MemberSubscription::new(["a", "b"]))]);
    for name in ASSIGNOR_NAMES {
        let a = assignor_by_name(name).unwrap().assign(&ppt, &subs);
        assert!(a["m1"].iter().all(|(t, _)| t == "a"), "{name}");
        assert!(a.values().flatten().all(|(t, _)| t != "c"), "{name}");
        assert_eq!(a.values().map(Vec::len).sum::<usize>(), 6, "{name}");
    }
}

#[test]
fn names_and_protocols() {
    for name in ASSIGNOR_NAMES {
        assert_eq!(assignor_by_name(name).unwrap().name(), name);
    }
    assert!(assignor_by_name("uniform").is_none());
    assert_eq!(RangeAssignor.protocol(), RebalanceProtocol::Eager);
    assert_eq!(StickyAssignor.protocol(), RebalanceProtocol::Eager);
    assert_eq!(CooperativeStickyAssignor.protocol(), RebalanceProtocol::Cooperative);
    assert_eq!(
        CooperativeStickyAssignor.supported_protocols(),
        &[RebalanceProtocol::Cooperative, RebalanceProtocol::Eager]
    );
    assert_eq!((RebalanceProtocol::Eager.id(), RebalanceProtocol::Cooperative.id()), (0, 1));
}

// ---------------------------------------------------------------------------------------------
// Subscription and assignment bytes.

#[test]
fn sticky_user_data_bytes() {
    let data = StickyUserData { partitions: vec![("t".into(), 1), ("t".into(), 0)], generation: Some(7) };
    let bytes = data.encode();
    #[rustfmt::skip]
    let expected = [
        0, 0, 0, 1,          // one topic
        0, 1, b't',          // "t"
        0, 0, 0, 2,          // two partitions
        0, 0, 0, 1, 0, 0, 0, 0,
        0, 0, 0, 7,          // generation
    ];
    assert_eq!(bytes, expected);
    assert_eq!(StickyUserData::decode(&bytes), Some(data.clone()));
    // v0 (no generation) and trailing bytes shorter than a generation read as v0.
    let v0 = StickyUserData { generation: None, ..data };
    assert_eq!(StickyUserData::decode(&bytes[..bytes.len() - 4]), Some(v0.clone()));
    assert_eq!(StickyUserData::decode(&bytes[..bytes.len() - 2]), Some(v0));
    assert_eq!(StickyUserData::decode(&bytes[..5]), None);
    assert_eq!(StickyUserData::decode(&[0xff, 0xff, 0xff, 0xff]), None);
    assert_eq!(encode_cooperative_user_data(-1), vec![0xff; 4]);
    assert_eq!(decode_cooperative_user_data(&[0, 0, 1, 0, 9]), Some(256));
    assert_eq!(decode_cooperative_user_data(&[0, 0, 1]), None);
}

#[test]
fn sticky_member_data_from_user_data() {
    let sub = |user_data: Option<Vec<u8>>| ConsumerSubscription {
        version: 3,
        topics: vec!["t".into()],
        user_data,
        owned_partitions: vec![],
        generation_id: 4,
        rack_id: None,
    };
    let m = StickyAssignor.member_subscription(&sub(None));
    assert_eq!((m.owned_partitions.len(), m.generation), (0, None));
    let m = StickyAssignor.member_subscription(&sub(Some(vec![])));
    assert_eq!((m.owned_partitions.len(), m.generation), (0, None));
    let m = StickyAssignor.member_subscription(&sub(Some(vec![1, 2, 3])));
    assert_eq!((m.owned_partitions.len(), m.generation), (0, Some(DEFAULT_GENERATION)));
    let bytes = StickyUserData { partitions: tps("t", [2]), generation: Some(3) }.encode();
    let m = StickyAssignor.member_subscription(&sub(Some(bytes)));
    assert_eq!((m.owned_partitions, m.generation), (tps("t", [2]), Some(3)));
    // cooperative-sticky: protocol generation first, user data before v2.
    let mut s = sub(Some(encode_cooperative_user_data(9)));
    s.owned_partitions =
        vec![crate::protocol::consumer_protocol::TopicPartitions { topic: "t".into(), partitions: vec![1] }];
    let m = CooperativeStickyAssignor.member_subscription(&s);
    assert_eq!((m.owned_partitions.clone(), m.generation), (tps("t", [1]), Some(4)));
    s.generation_id = -1;
    assert_eq!(CooperativeStickyAssignor.member_subscription(&s).generation, Some(9));
    s.user_data = Some(vec![1]);
    assert_eq!(CooperativeStickyAssignor.member_subscription(&s).generation, Some(DEFAULT_GENERATION));
    s.user_data = None;
    assert_eq!(CooperativeStickyAssignor.member_subscription(&s).generation, None);
}

#[test]
fn subscription_round_trips_through_bytes() {
    let topics_list = vec!["b".to_string(), "a".to_string(), "b".to_string()];
    let assigned = vec![("b".to_string(), 2), ("a".to_string(), 1), ("a".to_string(), 0)];
    for name in ASSIGNOR_NAMES {
        let assignor = assignor_by_name(name).unwrap();
        for version in 0..=3i16 {
            let state =
                JoinState { topics: &topics_list, assigned: Some(&assigned), generation: 6, rack_id: Some("r1") };
            let sub = build_subscription(assignor, &state, version);
            assert_eq!(sub.topics, vec!["a".to_string(), "b".to_string()]);
            let bytes = sub.encode().unwrap();
            let member = decode_member_subscription(assignor, &bytes, Some("inst")).unwrap();
            assert_eq!(member.topics, sub.topics, "{name} v{version}");
            assert_eq!(member.group_instance_id.as_deref(), Some("inst"));
            assert_eq!(member.rack.as_deref(), (version >= 3).then_some("r1"), "{name} v{version}");
            let mut owned = member.owned_partitions.clone();
            owned.sort();
            let mut sorted_assigned = assigned.clone();
            sorted_assigned.sort();
            match name {
                // The previous assignment travels in the user data, at every version.
                "sticky" => assert_eq!((owned, member.generation), (sorted_assigned, Some(6))),
                // Owned partitions need v1; the generation is in the user data before v2.
                "cooperative-sticky" => {
                    let expected = if version >= 1 { sorted_assigned } else { vec![] };
                    assert_eq!((owned, member.generation), (expected, Some(6)), "v{version}");
                }
                // Eager assignors own nothing when they join; the generation needs v2.
                _ => {
                    assert!(owned.is_empty());
                    assert_eq!(member.generation, (version >= 2).then_some(6), "{name} v{version}");
                }
            }
        }
        // A member that never had an assignment.
        let state = JoinState { topics: &topics_list, assigned: None, generation: -1, rack_id: None };
        let member =
            decode_member_subscription(assignor, &build_subscription(assignor, &state, 3).encode().unwrap(), None)
                .unwrap();
        assert!(member.owned_partitions.is_empty());
        let expected_generation = if name == "cooperative-sticky" { Some(-1) } else { None };
        assert_eq!(member.generation, expected_generation, "{name}");
    }
}

#[test]
fn leader_round_trip() {
    let topics_list = vec!["t".to_string()];
    let state = JoinState { topics: &topics_list, ..Default::default() };
    for name in ASSIGNOR_NAMES {
        let assignor = assignor_by_name(name).unwrap();
        let metadata = build_subscription(assignor, &state, 3).encode().unwrap();
        let group: Vec<GroupMember<'_>> = ["c1", "c2", "c3"]
            .iter()
            .map(|m| GroupMember { member_id: m, group_instance_id: None, metadata: &metadata })
            .collect();
        let out = perform_assignment(assignor, &topics(&[("t", 12)]), &group, 3).unwrap();
        let decoded: BTreeMap<String, Vec<TopicPartition>> =
            out.iter().map(|(m, b)| (m.clone(), decode_assignment(b).unwrap())).collect();
        let (ppt, subs) = three_on_t12();
        assert_eq!(decoded, assignor.assign(&ppt, &subs), "{name}");
    }
    let bad = [GroupMember { member_id: "x", group_instance_id: None, metadata: &[0] }];
    assert!(matches!(
        perform_assignment(&RangeAssignor, &BTreeMap::new(), &bad, 3),
        Err(AssignorError::Subscription { .. })
    ));
}

#[test]
fn assignment_groups_topics_in_order_of_appearance() {
    let a = build_assignment(&[("b".into(), 1), ("a".into(), 0), ("b".into(), 0)], 3);
    assert_eq!(a.assigned_partitions.len(), 2);
    assert_eq!(a.assigned_partitions[0].topic, "b");
    assert_eq!(a.assigned_partitions[0].partitions, vec![1, 0]);
    assert_eq!(
        decode_assignment(&a.encode().unwrap()).unwrap(),
        vec![("b".into(), 1), ("b".into(), 0), ("a".into(), 0)]
    );
}

// ---------------------------------------------------------------------------------------------
// Properties.

/// A group: partition counts of topics t0.., and per member the subscribed topic indexes.
#[derive(Clone, Debug)]
struct Scenario {
    counts: Vec<i32>,
    subscriptions: Vec<Vec<usize>>,
}

impl Scenario {
    fn partitions_per_topic(&self) -> BTreeMap<String, i32> {
        self.counts.iter().enumerate().map(|(t, n)| (format!("t{t}"), *n)).collect()
    }

    fn subscriptions(&self) -> BTreeMap<String, MemberSubscription> {
        self.subscriptions
            .iter()
            .enumerate()
            .map(|(m, ts)| (format!("m{m:02}"), MemberSubscription::new(ts.iter().map(|t| format!("t{t}")))))
            .collect()
    }
}

/// Scenarios with identical subscriptions (`equal`) or random ones; up to 14 members so that
/// some have more members than partitions.
fn scenario(equal: bool) -> impl Strategy<Value = Scenario> {
    (prop::collection::vec(0i32..9, 1..5), 1usize..15).prop_flat_map(move |(counts, n)| {
        let nt = counts.len();
        let subs = if equal {
            prop::collection::btree_set(0..nt, 1..=nt)
                .prop_map(move |s| vec![s.into_iter().collect::<Vec<_>>(); n])
                .boxed()
        } else {
            prop::collection::vec(prop::collection::btree_set(0..nt, 0..=nt).prop_map(|s| s.into_iter().collect()), n)
                .boxed()
        };
        (Just(counts), subs).prop_map(|(counts, subscriptions)| Scenario { counts, subscriptions })
    })
}

/// Checks that `a` only gives members partitions of their topics, each at most once, and (if
/// `complete`) every partition of a subscribed topic exactly once.
fn check_valid(
    ppt: &BTreeMap<String, i32>,
    subs: &BTreeMap<String, MemberSubscription>,
    a: &Assignment,
    complete: bool,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.keys().collect::<Vec<_>>(), subs.keys().collect::<Vec<_>>());
    let mut seen = BTreeSet::new();
    for (m, partitions) in a {
        for (t, p) in partitions {
            prop_assert!(subs[m].topics.contains(t), "{} got {}-{} without subscribing", m, t, p);
            prop_assert!(*p >= 0 && *p < ppt[t]);
            prop_assert!(seen.insert((t.clone(), *p)), "{}-{} assigned twice", t, p);
        }
    }
    if complete {
        let subscribed: BTreeSet<&String> = subs.values().flat_map(|s| &s.topics).collect();
        let expected: usize = ppt.iter().filter(|(t, _)| subscribed.contains(t)).map(|(_, n)| *n as usize).sum();
        prop_assert_eq!(seen.len(), expected);
    }
    Ok(())
}

fn spread(a: &Assignment) -> usize {
    let loads = a.values().map(Vec::len);
    loads.clone().max().unwrap_or(0) - loads.min().unwrap_or(0)
}

/// The owned state after `a`, at `generation`.
fn owning(
    subs: &BTreeMap<String, MemberSubscription>,
    a: &Assignment,
    generation: i32,
) -> BTreeMap<String, MemberSubscription> {
    subs.iter().map(|(m, s)| (m.clone(), s.clone().with_owned(a[m].clone()).with_generation(generation))).collect()
}

/// Adds ownership claims: (partition, member, generation), indexes wrapping around.
fn add_claims(
    ppt: &BTreeMap<String, i32>,
    subs: &mut BTreeMap<String, MemberSubscription>,
    claims: impl IntoIterator<Item = (prop::sample::Index, usize, Option<i32>)>,
) {
    let all: Vec<TopicPartition> = ppt.iter().flat_map(|(t, n)| (0..*n).map(move |p| (t.clone(), p))).collect();
    let ids: Vec<String> = subs.keys().cloned().collect();
    if all.is_empty() {
        return;
    }
    for (tp, member, generation) in claims {
        let sub = subs.get_mut(&ids[member % ids.len()]).unwrap();
        sub.owned_partitions.push(all[tp.index(all.len())].clone());
        sub.generation = generation;
    }
}

const ALL: [&dyn Assignor; 4] = [&RangeAssignor, &RoundRobinAssignor, &StickyAssignor, &CooperativeStickyAssignor];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_assignor_is_valid(s in prop_oneof![scenario(true), scenario(false)]) {
        let (ppt, subs) = (s.partitions_per_topic(), s.subscriptions());
        for assignor in ALL {
            let a = assignor.assign(&ppt, &subs);
            check_valid(&ppt, &subs, &a, true)?;
        }
    }

    #[test]
    fn equal_subscriptions_are_balanced(s in scenario(true)) {
        let (ppt, subs) = (s.partitions_per_topic(), s.subscriptions());
        for assignor in [&RoundRobinAssignor as &dyn Assignor, &StickyAssignor, &CooperativeStickyAssignor] {
            prop_assert!(spread(&assignor.assign(&ppt, &subs)) <= 1, "{}", assignor.name());
        }
        // range balances each topic on its own.
        let a = RangeAssignor.assign(&ppt, &subs);
        for topic in ppt.keys() {
            let per_topic: Assignment =
                a.iter().map(|(m, v)| (m.clone(), v.iter().filter(|(t, _)| t == topic).cloned().collect())).collect();
            prop_assert!(spread(&per_topic) <= 1);
        }
    }

    #[test]
    fn sticky_balance_with_any_subscriptions(
        s in scenario(false),
        claims in prop::collection::vec((any::<prop::sample::Index>(), 0usize..14), 0..40),
    ) {
        // Kafka's balance criterion: no partition could move to a member holding two fewer;
        // from scratch and from random previous ownership.
        let ppt = s.partitions_per_topic();
        let mut subs = s.subscriptions();
        add_claims(&ppt, &mut subs, claims.into_iter().map(|(tp, m)| (tp, m, Some(1))));
        let a = StickyAssignor.assign(&ppt, &subs);
        let load: HashMap<&String, usize> = a.iter().map(|(m, v)| (m, v.len())).collect();
        for (owner, partitions) in &a {
            for (t, _) in partitions {
                for (m, sub) in &subs {
                    prop_assert!(
                        !sub.topics.contains(t) || load[m] + 1 >= load[owner],
                        "{} ({}) could take {} from {} ({})", m, load[m], t, owner, load[owner]
                    );
                }
            }
        }
    }

    #[test]
    fn sticky_member_leaves(s in scenario(true), leaver in any::<prop::sample::Index>()) {
        let (ppt, subs) = (s.partitions_per_topic(), s.subscriptions());
        let before = StickyAssignor.assign(&ppt, &subs);
        let mut next = owning(&subs, &before, 1);
        let leaver = next.keys().nth(leaver.index(next.len())).unwrap().clone();
        next.remove(&leaver);
        for assignor in [&StickyAssignor as &dyn Assignor, &CooperativeStickyAssignor] {
            let after = assignor.assign(&ppt, &next);
            check_valid(&ppt, &next, &after, true)?;
            prop_assert!(spread(&after) <= 1);
            // Everyone keeps what they had; only the leaver's partitions move.
            for (m, owned) in &before {
                if *m != leaver {
                    prop_assert!(owned.iter().all(|tp| after[m].contains(tp)), "{} lost some of {:?}", m, owned);
                }
            }
        }
    }

    #[test]
    fn sticky_member_joins(s in scenario(true)) {
        let (ppt, subs) = (s.partitions_per_topic(), s.subscriptions());
        let before = StickyAssignor.assign(&ppt, &subs);
        let mut next = owning(&subs, &before, 1);
        let topics = subs.values().next().unwrap().topics.clone();
        next.insert("newcomer".to_string(), MemberSubscription::new(topics));
        let after = StickyAssignor.assign(&ppt, &next);
        check_valid(&ppt, &next, &after, true)?;
        prop_assert!(spread(&after) <= 1);
        // Partitions only move to the newcomer.
        for (m, partitions) in &after {
            if m != "newcomer" {
                prop_assert!(partitions.iter().all(|tp| before[m].contains(tp)), "{} gained a partition", m);
            }
        }
    }

    #[test]
    fn cooperative_never_hands_over_an_owned_partition(
        s in prop_oneof![scenario(true), scenario(false)],
        claims in prop::collection::vec((any::<prop::sample::Index>(), 0usize..14, prop::option::of(0i32..3)), 0..40),
    ) {
        let ppt = s.partitions_per_topic();
        let mut subs = s.subscriptions();
        // Random, possibly conflicting claims and generations (some of unsubscribed topics).
        add_claims(&ppt, &mut subs, claims);
        // The valid owner: the only claimant of the highest generation among the claimants.
        let mut claimants: BTreeMap<&TopicPartition, Vec<(i32, &String)>> = BTreeMap::new();
        for (m, sub) in &subs {
            for tp in sub.owned_partitions.iter().collect::<BTreeSet<_>>() {
                claimants.entry(tp).or_default().push((sub.generation.unwrap_or(-1), m));
            }
        }
        let a = CooperativeStickyAssignor.assign(&ppt, &subs);
        check_valid(&ppt, &subs, &a, false)?;
        for (m, partitions) in &a {
            for tp in partitions {
                if let Some(c) = claimants.get(tp) {
                    let top = c.iter().map(|(g, _)| *g).max().unwrap();
                    let winners: Vec<&&String> = c.iter().filter(|(g, _)| *g == top).map(|(_, m)| m).collect();
                    prop_assert!(winners.len() == 1 && *winners[0] == m, "{:?} given to {} but claimed by {:?}", tp, m, c);
                }
            }
        }
        // And the eager target assigns everything exactly once.
        check_valid(&ppt, &subs, &StickyAssignor.assign(&ppt, &subs), true)?;
    }

    #[test]
    fn cooperative_converges(s in scenario(true)) {
        // Start from range's assignment, then rebalance with cooperative-sticky: the first
        // rebalance only revokes, the second completes, the third changes nothing.
        let (ppt, subs) = (s.partitions_per_topic(), s.subscriptions());
        let mut current = RangeAssignor.assign(&ppt, &subs);
        let mut history = Vec::new();
        for generation in 1..4 {
            let next = CooperativeStickyAssignor.assign(&ppt, &owning(&subs, &current, generation));
            // A partition goes to its owner, or to someone only if nobody owned it.
            for (m, partitions) in &next {
                for tp in partitions {
                    prop_assert!(current[m].contains(tp) || !current.values().any(|v| v.contains(tp)));
                }
            }
            history.push(next.clone());
            current = next;
        }
        check_valid(&ppt, &subs, &history[1], true)?;
        prop_assert!(spread(&history[1]) <= 1);
        prop_assert_eq!(&history[1], &history[2]);
    }

    #[test]
    fn larger_groups_stay_fast(
        counts in prop::collection::vec(0i32..40, 1..7),
        n in 1usize..40,
        seed in any::<u64>(),
    ) {
        // Unequal subscriptions with a previous sticky assignment, then a member leaves and
        // one with different topics joins: everything stays valid and complete.
        let nt = counts.len();
        let subscriptions = (0..n).map(|m| {
            let mut x = seed.rotate_left(m as u32 * 7) ^ m as u64;
            (0..nt).filter(|_| { x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); x >> 62 != 0 }).collect()
        }).collect();
        let s = Scenario { counts, subscriptions };
        let (ppt, subs) = (s.partitions_per_topic(), s.subscriptions());
        let first = StickyAssignor.assign(&ppt, &subs);
        let mut next = owning(&subs, &first, 1);
        next.pop_first();
        next.insert("zz".into(), MemberSubscription::new(["t0"]));
        for assignor in [&StickyAssignor as &dyn Assignor, &CooperativeStickyAssignor] {
            let a = assignor.assign(&ppt, &next);
            check_valid(&ppt, &next, &a, assignor.protocol() == RebalanceProtocol::Eager)?;
        }
    }

    #[test]
    fn sticky_user_data_round_trip(
        partitions in prop::collection::vec(("[a-z]{1,5}", 0i32..1000), 0..20),
        generation in prop::option::of(any::<i32>()),
    ) {
        let data = StickyUserData { partitions, generation };
        let decoded = StickyUserData::decode(&data.encode()).unwrap();
        prop_assert_eq!(decoded.generation, data.generation);
        // Grouped by topic: the same partitions, topic by topic.
        let mut a = decoded.partitions.clone();
        let mut b = data.partitions.clone();
        a.sort();
        b.sort();
        prop_assert_eq!(a, b);
        prop_assert_eq!(decode_cooperative_user_data(&encode_cooperative_user_data(generation.unwrap_or(-1))), Some(generation.unwrap_or(-1)));
    }

    #[test]
    fn user_data_decoding_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = StickyUserData::decode(&bytes);
        let _ = decode_cooperative_user_data(&bytes);
    }
}
