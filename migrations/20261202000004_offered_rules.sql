-- Which of a release's default rules each stored policy has been offered. A rule that
-- a new release adds to a default policy is added to the stored policy once, at the
-- first start that knows it; a rule an operator removed afterwards was offered and is
-- never added back, and rules an operator edited are never touched.
--
-- Every rule a stored policy has today counts as offered: the releases before this one
-- seeded policies whole, so nothing they had is new.
ALTER TABLE limiter_policies ADD COLUMN offered_rules TEXT[] NOT NULL DEFAULT '{}';

UPDATE limiter_policies
SET offered_rules = ARRAY(SELECT jsonb_array_elements(config -> 'rules') ->> 'name');
