-- The history's retention (src/history/retention.rs) deletes by minute, oldest first, a
-- bounded batch at a time: without these a batch scans the table (minute is second in
-- their primary keys). history_hitters' key starts with minute, refusal_samples and
-- history_records have theirs.
CREATE INDEX history_items_minute ON history_items (minute);
CREATE INDEX history_decisions_minute ON history_decisions (minute);
CREATE INDEX history_rooms_minute ON history_rooms (minute);
