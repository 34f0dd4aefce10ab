-- 0028_registry_credentials: an org's credentials for container registries
-- (runplane/images/credentials.py, docs/containers.md "Registry credentials"). registry:
-- host[:port] (Docker Hub: docker.io); secret: the password, sealed (AES-256-GCM, the
-- credential id as associated data), never returned by the API.
CREATE TABLE registry_credentials (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL,
    registry   TEXT NOT NULL,
    username   TEXT NOT NULL,
    secret     TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX registry_credentials_org_registry ON registry_credentials (org_id, registry);
