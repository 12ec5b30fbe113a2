-- The edge limiter's domains (issue 40): one row per domain, its limits as the document
-- an envoyproxy/ratelimit YAML file holds (JSONB, checked by the app before it is
-- written). Files in `rls_config_dir` seed a domain only where none is stored; from
-- then on this table is the truth, edited live through `/admin/api/rls/domains/{domain}`.
-- Every change bumps `version` (the admin API's ETag, checked against `If-Match`).
CREATE TABLE rls_domains (
    domain     TEXT        PRIMARY KEY CHECK (char_length(domain) BETWEEN 1 AND 64),
    document   JSONB       NOT NULL,
    version    BIGINT      NOT NULL DEFAULT 1 CHECK (version >= 1),
    updated_by TEXT        NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Every change of a domain, deletions included (so no foreign key): who (the admin
-- token's name, or `seed` for a file), when, the version it made (a deletion: the
-- version deleted), before and after (NULL before a creation, after a deletion).
CREATE TABLE rls_domain_audit (
    id           BIGSERIAL   PRIMARY KEY,
    domain       TEXT        NOT NULL,
    action       TEXT        NOT NULL CHECK (action IN ('create', 'update', 'delete')),
    version      BIGINT      NOT NULL,
    old_document JSONB,
    new_document JSONB,
    changed_by   TEXT        NOT NULL,
    changed_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX rls_domain_audit_domain ON rls_domain_audit (domain, changed_at DESC);
