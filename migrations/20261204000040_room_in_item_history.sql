-- Issue 36: the waiting room's changes are part of the item's history, and the operator
-- can post a message to everyone waiting.
--
-- `room` is the audit action of every change of an item's waiting room (turned on or
-- off, its order, rate, passes, message; a closed room reopened by a stock raise): its
-- `old_values` / `new_values` are the room's settings before and after, in the API's
-- spelling.
ALTER TABLE item_audit DROP CONSTRAINT item_audit_action_check;
ALTER TABLE item_audit ADD CONSTRAINT item_audit_action_check
    CHECK (action IN ('create', 'edit', 'end', 'archive', 'pause', 'resume', 'room'));

-- What the operator tells everyone waiting, shown as text on their next poll; '' is none.
ALTER TABLE waiting_rooms ADD COLUMN message TEXT NOT NULL DEFAULT ''
    CHECK (char_length(message) <= 200);
