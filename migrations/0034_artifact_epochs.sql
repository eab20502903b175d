-- Artifacts per attempt (contract v1.3): an artifact belongs to the epoch it was uploaded at,
-- so every attempt of a job may upload its own files under the same paths; a path is taken only
-- within one epoch.
--
-- Existing artifacts get the epoch of the last lease of their job at or before they were
-- uploaded (its `state` event), or the job's epoch where no such event is left.
ALTER TABLE artifacts ADD COLUMN epoch bigint;
UPDATE artifacts a
   SET epoch = COALESCE(
           (SELECT (e.data->>'epoch')::bigint
              FROM job_events e
             WHERE e.job_id = a.job_id AND e.kind = 'state' AND e.data->>'state' = 'leased'
               AND e.at <= a.created_at
             ORDER BY e.seq DESC
             LIMIT 1),
           (SELECT j.epoch FROM jobs j WHERE j.id = a.job_id));
ALTER TABLE artifacts ALTER COLUMN epoch SET NOT NULL;
ALTER TABLE artifacts ADD CONSTRAINT artifacts_epoch_check CHECK (epoch >= 0);

-- One file per path and epoch. Keyed by path first: a download looks up a path's newest
-- epoch, or one epoch of it, by this key.
ALTER TABLE artifacts DROP CONSTRAINT artifacts_pkey;
ALTER TABLE artifacts ADD PRIMARY KEY (job_id, path, epoch);

-- The list's order, newest epoch first and then by path bytewise, so a page after a cursor
-- `(-epoch, path) > (-$e, $p)` is one range of this index.
CREATE INDEX artifacts_listed ON artifacts (job_id, (-epoch), path COLLATE "C");
