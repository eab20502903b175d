-- Artifacts (contract v1.2, part B): files a runner uploads while it holds a job.
--
-- A blob is the bytes of one upload, in either store: chunk rows here (store 'pg') or one
-- object in an S3-compatible bucket (store 's3', `key` its object key). It exists from the
-- first byte on; `complete` turns true in the transaction that makes its artifact visible,
-- which is fenced by the job's epoch. An upload that never completes (its runner was
-- superseded, its connection broke, its replica died) leaves an incomplete blob that the
-- replica removes at once, or the sweep after `touched_at` goes stale.
--
-- Everything hangs off the job: deleting a job (by hand, by retention) cascades to its
-- blobs, their chunks and its artifacts. A deleted S3 blob leaves its object key in
-- artifact_garbage (a trigger, so whoever deletes the job needs to know nothing of S3), which
-- a paced sweep removes from the bucket.
CREATE TABLE artifact_blobs (
    id         uuid        PRIMARY KEY,
    job_id     uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    store      text        NOT NULL CHECK (store IN ('pg', 's3')),
    key        text,
    complete   boolean     NOT NULL DEFAULT false,
    touched_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((store = 's3') = (key IS NOT NULL))
);
CREATE INDEX artifact_blobs_by_job ON artifact_blobs (job_id);
-- The stale-upload sweep reads only incomplete blobs.
CREATE INDEX artifact_blobs_incomplete ON artifact_blobs (touched_at) WHERE NOT complete;

-- The PostgreSQL store: a blob's bytes in chunks of a fixed size (the last may be shorter),
-- numbered from 0. Stored uncompressed out of line, so a Range read fetches only the slices
-- it needs and nothing spends CPU compressing build outputs that rarely compress.
CREATE TABLE artifact_chunks (
    blob_id uuid    NOT NULL REFERENCES artifact_blobs (id) ON DELETE CASCADE,
    seq     integer NOT NULL CHECK (seq >= 0),
    data    bytea   NOT NULL,
    PRIMARY KEY (blob_id, seq)
);
ALTER TABLE artifact_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- A job's visible artifacts, keyed by job and path.
CREATE TABLE artifacts (
    job_id     uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    path       text        NOT NULL CHECK (length(path) BETWEEN 1 AND 255),
    blob_id    uuid        NOT NULL UNIQUE REFERENCES artifact_blobs (id) ON DELETE CASCADE,
    size       bigint      NOT NULL CHECK (size >= 0),
    sha256     text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    chunk_size integer     NOT NULL CHECK (chunk_size > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, path)
);

-- Object keys of deleted S3 blobs, waiting to be removed from the bucket.
CREATE TABLE artifact_garbage (
    key        text        PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION artifact_blob_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO artifact_garbage (key) VALUES (OLD.key) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER artifact_blob_deleted AFTER DELETE ON artifact_blobs
    FOR EACH ROW WHEN (OLD.key IS NOT NULL) EXECUTE FUNCTION artifact_blob_deleted();
