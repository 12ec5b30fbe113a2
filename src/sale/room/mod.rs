//! The waiting room: a fair queue in front of an item's sale (issue 24; the design
//! note is docs/waiting-room.md).
//!
//! A shopper joins (`POST /api/items/{id}/queue`) and gets a signed **ticket** naming
//! their join index. Places are drawn from the indexes ([`shuffle`]): everyone who
//! joined before the sale's start is shuffled at the start, so arriving first (or
//! firing fastest) gives no edge; after the start, `fifo` places each joiner at its
//! index and `random` shuffles each second's joiners. The [`inlet`] admits places in
//! order at `admitPerSecond`, never with more than `maxActive` passes alive, skipping
//! shoppers who stopped polling. A poll (`GET …/queue`) is answered from this instance's
//! copy of the room ([`lobby`]), with no Redis call; an admitted place's poll carries a
//! signed **pass**, which `POST /seckill` asks for and the reservation script spends.
//! Whether an item needs one is its **room gate** in Redis (`stock::RoomGates`), set
//! before an operator's change is answered and read by the reservation script itself.
//!
//! The files, one job each: [`room_config`] (the settings and their bounds), [`rooms`]
//! (their store and cache), [`room_redis`] (the scripts and reads), [`room_view`] (an
//! instance's copy), [`shuffle`] (the draw), [`estimate`] (the wait), [`step`] (an inlet step
//! as recorded, which those two read), [`standing`]
//! (a poll's answer), [`lobby`] (the copies and the liveness batch), [`inlet`] (the
//! loop), [`room_error`] (the refusals), [`waiting_room`] (what HTTP calls),
//! [`poll_budget`] (each ticket's polls, limited in process).

pub mod estimate;
pub mod inlet;
pub mod join_times;
pub mod lobby;
pub mod poll_budget;
pub mod room_config;
pub mod room_error;
pub mod room_redis;
pub mod room_view;
pub mod rooms;
pub mod shuffle;
pub mod standing;
pub mod step;
pub mod waiting_room;

pub use inlet::Inlet;
pub use lobby::Lobby;
pub use poll_budget::{PollBudget, PollLimits};
pub use room_config::{InvalidRoom, RoomConfig, RoomEdit, RoomSettings};
pub use room_error::RoomError;
pub use room_redis::RoomRedis;
pub use rooms::Rooms;
pub use waiting_room::{Answer, OfferedPass, RoomStatus, WaitingRoom, POLL_EVERY_SECS};
