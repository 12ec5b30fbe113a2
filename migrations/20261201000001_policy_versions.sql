-- Optimistic concurrency for policy edits: every change bumps `version`, which the admin
-- API shows (and sends as the ETag); an edit made from an older version than the stored
-- one is refused (409 VERSION_CONFLICT) instead of overwriting a change its author never
-- saw. Existing policies start at version 1.
ALTER TABLE limiter_policies ADD COLUMN version BIGINT NOT NULL DEFAULT 1 CHECK (version >= 1);
