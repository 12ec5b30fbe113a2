//! When this instance's joiners joined, until the inlet reaches their place: the wait
//! from join to admission the history counts (`tally::per_item`). Neither Redis nor a
//! ticket keeps a join's time, but every join is made by one instance, and every
//! instance's lobby reads every inlet step; so the instance a shopper joined on counts
//! their wait, once, when its copy first shows the step that admitted them.
//!
//! Bounded: at most [`JOIN_TIMES`] joiners are timed at once per instance (~50 bytes
//! each); a join past that is not timed, and its admission counts no wait. A killed
//! instance's joiners are never timed.

use std::collections::HashMap;
use std::sync::Mutex;

use super::room_view::RoomView;
use super::step::Step;
use crate::sale::item::ItemId;

/// The most joiners one instance times at once.
pub const JOIN_TIMES: usize = 100_000;

/// Join index → joined at (ms), of one room.
type Joins = HashMap<u64, i64>;

/// The joins per item, and how many in all.
#[derive(Default)]
pub struct JoinTimes(Mutex<(HashMap<ItemId, Joins>, usize)>);

impl JoinTimes {
    /// The joiner with `index` joined `item`'s room at `at_ms` on this instance.
    pub fn joined(&self, item: ItemId, index: u64, at_ms: i64) {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (items, len) = &mut *guard;
        if *len < JOIN_TIMES
            && items
                .entry(item)
                .or_default()
                .insert(index, at_ms)
                .is_none()
        {
            *len += 1;
        }
    }

    /// The waits, in whole seconds, of this instance's joiners admitted by `steps` (new
    /// to `view`, the copy they were read into); the places they skipped are forgotten
    /// too.
    pub fn reached(&self, item: ItemId, steps: &[Step], view: &RoomView) -> Vec<u64> {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (items, len) = &mut *guard;
        let Some(joins) = items.get_mut(&item) else {
            return Vec::new();
        };
        let mut waits = Vec::new();
        for step in steps {
            for place in step.from..step.to {
                let Some(joined_ms) = view.index_at(place).and_then(|i| joins.remove(&i)) else {
                    continue;
                };
                *len -= 1;
                if !step.skipped.contains(&place) {
                    waits.push((step.at_ms - joined_ms).max(0) as u64 / 1_000);
                }
            }
        }
        waits
    }

    /// Forgets the rooms not in `items` (their sale ended, or the room was turned off).
    pub fn keep_only(&self, items: &[ItemId]) {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (rooms, len) = &mut *guard;
        rooms.retain(|item, _| items.contains(item));
        *len = rooms.values().map(HashMap::len).sum();
    }
}
