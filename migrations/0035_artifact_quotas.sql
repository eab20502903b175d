-- Artifact bounds (contract v1.3): a job holds at most LEASEHOLD_ARTIFACT_MAX_FILES files and
-- LEASEHOLD_ARTIFACT_JOB_MAX_BYTES bytes over all its attempts, a workspace at most
-- LEASEHOLD_ARTIFACT_WORKSPACE_MAX_BYTES bytes.
--
-- Every blob, stored or being stored, holds a reservation: one file, and `reserved` bytes (an
-- upload of a declared length reserves it whole before its first byte; a chunked one reserves
-- ahead of the bytes it stores; a published one holds exactly its size). The reservations are
-- summed per job and per workspace in the two usage tables below, which artifact_reserve()
-- checks and moves under their row locks: concurrent uploads, on any replica, queue on the
-- job's row and then the workspace's, so they never pass a bound together. A deleted blob
-- (refused, cut off, swept, or its job deleted) gives its reservation back, by trigger: whoever
-- deletes one needs to know nothing of the bounds.
ALTER TABLE artifact_blobs ADD COLUMN workspace text;
ALTER TABLE artifact_blobs ADD COLUMN reserved bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0);
UPDATE artifact_blobs b SET workspace = j.workspace FROM jobs j WHERE j.id = b.job_id;
UPDATE artifact_blobs b SET reserved = a.size FROM artifacts a WHERE a.blob_id = b.id;
ALTER TABLE artifact_blobs ALTER COLUMN workspace SET NOT NULL;

CREATE TABLE artifact_job_usage (
    job_id uuid    PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    files  integer NOT NULL DEFAULT 0,
    bytes  bigint  NOT NULL DEFAULT 0
);
INSERT INTO artifact_job_usage (job_id, files, bytes)
SELECT job_id, count(*), sum(reserved) FROM artifact_blobs GROUP BY job_id;

CREATE TABLE artifact_workspace_usage (
    workspace text   PRIMARY KEY,
    bytes     bigint NOT NULL DEFAULT 0
);
INSERT INTO artifact_workspace_usage (workspace, bytes)
SELECT workspace, sum(reserved) FROM artifact_blobs GROUP BY workspace;

-- Move blob `blob`'s reservation to `want` bytes, and at least `need`: less than it holds gives
-- the difference back; more takes what the bounds leave, up to `want`, or nothing at all when
-- even `need` does not fit. With `start`, the blob is new: it is inserted (job `job`, `store`,
-- `key`) holding one file of the job's, or not at all. Bounds: `max_files` files and
-- `max_job_bytes` bytes per job, `max_workspace_bytes` (NULL: none) per workspace. Answers the
-- bytes the blob now holds, or NULL and which bound refused (`files`, `job_bytes`,
-- `workspace_bytes`; `gone`: no such job, or no such blob to grow).
CREATE FUNCTION artifact_reserve(blob uuid, job uuid, start boolean, store text, key text,
                                 need bigint, want bigint, max_files integer,
                                 max_job_bytes bigint, max_workspace_bytes bigint)
RETURNS TABLE (reserved bigint, refused text)
LANGUAGE plpgsql AS $$
DECLARE
    ws        text;
    held      bigint := 0;
    job_files integer;
    job_bytes bigint;
    ws_bytes  bigint;
    room      bigint;
    moved     bigint;
BEGIN
    SELECT j.workspace INTO ws FROM jobs j WHERE j.id = job;
    IF ws IS NULL THEN
        RETURN QUERY SELECT NULL::bigint, 'gone'::text;
        RETURN;
    END IF;
    IF start THEN
        INSERT INTO artifact_job_usage AS u (job_id) VALUES (job) ON CONFLICT DO NOTHING;
        INSERT INTO artifact_workspace_usage AS w (workspace) VALUES (ws) ON CONFLICT DO NOTHING;
    END IF;
    -- The job's row, then the workspace's: every writer of both takes them in this order.
    SELECT u.files, u.bytes INTO job_files, job_bytes
      FROM artifact_job_usage u WHERE u.job_id = job FOR UPDATE;
    SELECT w.bytes INTO ws_bytes
      FROM artifact_workspace_usage w WHERE w.workspace = ws FOR UPDATE;
    IF start THEN
        IF job_files IS NULL OR job_files + 1 > max_files THEN
            RETURN QUERY SELECT NULL::bigint, 'files'::text;
            RETURN;
        END IF;
    ELSE
        SELECT b.reserved INTO held FROM artifact_blobs b WHERE b.id = blob FOR UPDATE;
        IF NOT FOUND OR job_files IS NULL THEN
            RETURN QUERY SELECT NULL::bigint, 'gone'::text;
            RETURN;
        END IF;
    END IF;
    IF want <= held THEN
        moved := want - held;
    ELSE
        room := max_job_bytes - job_bytes;
        IF need - held > room THEN
            RETURN QUERY SELECT NULL::bigint, 'job_bytes'::text;
            RETURN;
        END IF;
        IF max_workspace_bytes IS NOT NULL THEN
            IF need - held > max_workspace_bytes - ws_bytes THEN
                RETURN QUERY SELECT NULL::bigint, 'workspace_bytes'::text;
                RETURN;
            END IF;
            room := least(room, max_workspace_bytes - ws_bytes);
        END IF;
        moved := least(want - held, room);
    END IF;
    IF start THEN
        INSERT INTO artifact_blobs (id, job_id, workspace, store, key, reserved)
        VALUES (blob, job, ws, store, key, moved);
    ELSE
        UPDATE artifact_blobs b SET reserved = b.reserved + moved WHERE b.id = blob;
    END IF;
    UPDATE artifact_job_usage u
       SET files = u.files + CASE WHEN start THEN 1 ELSE 0 END, bytes = u.bytes + moved
     WHERE u.job_id = job;
    UPDATE artifact_workspace_usage w SET bytes = w.bytes + moved WHERE w.workspace = ws;
    RETURN QUERY SELECT held + moved, NULL::text;
END
$$;

-- Deleted blobs give back their files and bytes (one statement-level pass: deleting a job
-- with many artifacts updates each usage row once).
CREATE FUNCTION artifact_blobs_released() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE artifact_job_usage u
       SET files = u.files - g.files, bytes = u.bytes - g.bytes
      FROM (SELECT job_id, count(*) AS files, sum(reserved) AS bytes
              FROM gone GROUP BY job_id) g
     WHERE u.job_id = g.job_id;
    UPDATE artifact_workspace_usage w
       SET bytes = w.bytes - g.bytes
      FROM (SELECT workspace, sum(reserved) AS bytes FROM gone GROUP BY workspace) g
     WHERE w.workspace = g.workspace;
    RETURN NULL;
END
$$;

CREATE TRIGGER artifact_blobs_released AFTER DELETE ON artifact_blobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION artifact_blobs_released();
