-- A rule may key only on a source its policy's routes supply (`KEY_SOURCES` in
-- src/configuration/policies.rs). Before that table, a rule on another source was
-- accepted and counted per address: a `client_id` rule on `seckill`, `orders_read` or
-- `queue_join` fell back to the caller's IP, and the admin lockout counts per address
-- whatever its one rule says. Such a rule is rewritten once to `ip`, what it counted by,
-- as an operator's change would be: a new version and an audit row by `upgrade`. (Its
-- Redis key changes from `…:<rule>:ip:<address>` to `…:<rule>:<address>`: its counts
-- start again once.) A `user` rule on `limited` or `admin_auth` was refused before and
-- cannot be stored; a policy not named here is checked by no route.
WITH rewritten AS (
    SELECT name,
           config AS old_config,
           jsonb_set(config, '{rules}', (
               SELECT jsonb_agg(
                          CASE
                              WHEN (name IN ('seckill', 'orders_read', 'queue_join')
                                    AND rule -> 'key' = '"client_id"')
                                OR (name = 'admin_auth' AND rule -> 'key' <> '"ip"')
                              THEN jsonb_set(rule, '{key}', '"ip"')
                              ELSE rule
                          END
                          ORDER BY position)
               FROM jsonb_array_elements(config -> 'rules') WITH ORDINALITY AS r (rule, position)
           )) AS new_config
    FROM limiter_policies
    WHERE jsonb_array_length(config -> 'rules') > 0
), changed AS (
    UPDATE limiter_policies p
    SET config = r.new_config, version = p.version + 1, updated_at = now()
    FROM rewritten r
    WHERE p.name = r.name AND r.new_config <> r.old_config
    RETURNING p.name, r.old_config, r.new_config
)
INSERT INTO limiter_policy_audit (policy, changed_by, old_config, new_config)
SELECT name, 'upgrade', old_config, new_config FROM changed;
