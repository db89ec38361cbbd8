//! One request's events as one unit: their keys and fingerprints, and what the request settles
//! by itself before the store is asked.
//!
//! Both forwarders judge a request's events together, so that a request answered 422, 409 or
//! 401 writes nothing. Before they do, [`Plan::new`] settles what needs no store: an event that
//! repeats an earlier one of the same request (the same event ID with the same payload, or, with
//! `body_dedup`, the same payload under another ID) is answered by that earlier event, and the
//! same event ID with two payloads in one request rejects the request. So the store sees each key
//! once per call, and a batch of one captured item copied a thousand times costs one event.

use std::collections::HashMap;

use super::{Delivery, Forwarded};
use crate::store::Fingerprint;

/// One event the store must judge: the first of its key in the request.
pub struct Planned<'a> {
    pub delivery: &'a Delivery<'a>,
    /// The dedup record's key.
    pub key: String,
    /// The fingerprint stored in records: the short form, or with `body_dedup` the whole digest.
    pub fingerprint: String,
    /// The body record's key, for a source with `body_dedup`.
    pub body_key: Option<String>,
    /// The event's partition of its source (0 when unpartitioned): whose stream it goes to.
    pub partition: usize,
}

/// Where the answer for one event of the request comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The store's verdict on `unique[i]`.
    Judged(usize),
    /// A repeat of `unique[i]` within the request.
    RepeatOf(usize),
    /// Its event ID came earlier in the request with another payload.
    Conflict,
}

/// A request's events, planned for one store call.
pub struct Plan<'a> {
    /// The events the store must judge, in request order.
    pub unique: Vec<Planned<'a>>,
    slots: Vec<Slot>,
}

impl<'a> Plan<'a> {
    pub fn new(deliveries: &'a [Delivery<'a>]) -> Self {
        let mut unique: Vec<Planned<'a>> = Vec::with_capacity(deliveries.len());
        let mut slots = Vec::with_capacity(deliveries.len());
        // A request of one event (every provider but Adyen) needs no index.
        let mut seen: HashMap<String, usize> = HashMap::new();
        for delivery in deliveries {
            let digest = delivery.fingerprint();
            let target = delivery.target;
            let event_id = delivery.event.event_id();
            let partition = target.partition_index(event_id, &digest);
            let keys = &target.partitions()[partition];
            let body_key = keys.body_key(&digest);
            // With body_dedup the record carries the whole digest, so that `hookonce forget`
            // can find the body record from the event's record: the body key's end.
            let fingerprint = match &body_key {
                Some(key) => key[key.len() - Fingerprint::BODY_KEY_LEN..].to_owned(),
                None => digest.encode(),
            };
            let planned = Planned {
                delivery,
                key: keys.record_key(event_id),
                fingerprint,
                body_key,
                partition,
            };
            let earlier = seen.get(&planned.key).or_else(|| {
                planned
                    .body_key
                    .as_ref()
                    .and_then(|body_key| seen.get(body_key))
            });
            let slot = match earlier.copied() {
                Some(i) if unique[i].fingerprint == planned.fingerprint => Slot::RepeatOf(i),
                Some(_) => Slot::Conflict,
                None => {
                    if deliveries.len() > 1 {
                        seen.insert(planned.key.clone(), unique.len());
                        if let Some(body_key) = &planned.body_key {
                            seen.insert(body_key.clone(), unique.len());
                        }
                    }
                    unique.push(planned);
                    Slot::Judged(unique.len() - 1)
                }
            };
            slots.push(slot);
        }
        Self { unique, slots }
    }

    /// The one partition all of the request's events belong to, or `None` when they span
    /// several: one script call must stay in one Redis Cluster slot, so a request cannot be
    /// written across partitions (configuration refuses `partitions > 1` for batch providers).
    pub fn partition(&self) -> Option<usize> {
        let first = self.unique.first().map_or(0, |p| p.partition);
        self.unique
            .iter()
            .all(|p| p.partition == first)
            .then_some(first)
    }

    /// The same event ID came twice with different payloads: the request is a mismatch and
    /// nothing of it may be written.
    pub fn has_conflict(&self) -> bool {
        self.slots.contains(&Slot::Conflict)
    }

    /// Answers for every event of the request, in order, from the store's verdicts on
    /// [`Plan::unique`] (in that order).
    pub fn answers(&self, judged: Vec<Forwarded>) -> Vec<Forwarded> {
        debug_assert_eq!(judged.len(), self.unique.len());
        // No repeat and no conflict (every request of one event): the verdicts are the answers.
        if self.slots.len() == judged.len() {
            return judged;
        }
        self.slots
            .iter()
            .map(|slot| match *slot {
                Slot::Judged(i) => judged[i].clone(),
                Slot::RepeatOf(i) => match &judged[i] {
                    Forwarded::New { entry_id, .. } | Forwarded::Duplicate { entry_id } => {
                        Forwarded::Duplicate {
                            entry_id: entry_id.clone(),
                        }
                    }
                    _ => Forwarded::Withheld,
                },
                Slot::Conflict => Forwarded::Mismatch,
            })
            .collect()
    }

    /// Answers for a request rejected before the store was asked: the conflicting events are
    /// mismatches and every other event is withheld with the request.
    pub fn rejected(&self) -> Vec<Forwarded> {
        self.answers(vec![Forwarded::Withheld; self.unique.len()])
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::event::VerifiedEvent;
    use crate::forward::Target;

    fn event(id: &str, body: &'static [u8]) -> VerifiedEvent {
        VerifiedEvent::new(id, "t", bytes::Bytes::from_static(body)).unwrap()
    }

    fn deliveries<'a>(target: &'a Target, events: &'a [VerifiedEvent]) -> Vec<Delivery<'a>> {
        events
            .iter()
            .map(|event| Delivery {
                target,
                event,
                received_at_ms: 0,
                content_type: None,
            })
            .collect()
    }

    #[test]
    fn repeats_within_a_request_are_answered_by_their_first_event() {
        let target = Target::new("h", "s", "adyen", None, Duration::from_secs(1));
        let events = [event("a", b"1"), event("b", b"2"), event("a", b"1")];
        let deliveries = deliveries(&target, &events);
        let plan = Plan::new(&deliveries);
        assert_eq!(plan.unique.len(), 2);
        assert!(!plan.has_conflict());
        let new = |id: &str| Forwarded::New {
            entry_id: id.into(),
            reclaimed: false,
        };
        let answers = plan.answers(vec![new("1-0"), new("1-1")]);
        assert_eq!(
            answers[2],
            Forwarded::Duplicate {
                entry_id: "1-0".into()
            }
        );
    }

    #[test]
    fn one_id_with_two_payloads_rejects_the_request() {
        let target = Target::new("h", "s", "adyen", None, Duration::from_secs(1));
        let events = [event("a", b"1"), event("b", b"2"), event("a", b"other")];
        let deliveries = deliveries(&target, &events);
        let plan = Plan::new(&deliveries);
        assert!(plan.has_conflict());
        assert_eq!(
            plan.rejected(),
            [
                Forwarded::Withheld,
                Forwarded::Withheld,
                Forwarded::Mismatch
            ]
        );
    }

    #[test]
    fn with_body_dedup_one_body_under_two_ids_is_one_event() {
        let target =
            Target::new("h", "s", "github", None, Duration::from_secs(1)).with_body_dedup(true);
        let events = [event("a", b"same"), event("b", b"same")];
        let deliveries = deliveries(&target, &events);
        let plan = Plan::new(&deliveries);
        assert_eq!(plan.unique.len(), 1);
        let body_key = plan.unique[0].body_key.as_deref().unwrap();
        assert!(body_key.starts_with("h:{s}:b:"), "{body_key}");
    }
}
