-- Secret scope (issue 18, row 5; docs/contract-notes.md, "Secret scope").
--
-- `runners`: 'workspace' (handed only to workspace-owned runners) or 'any' (personal runners
-- too). `dispatch`: 'member' (any member may name it in a dispatch) or 'admin' (only admins).
-- Secrets that exist before this migration take the safe defaults: 'workspace' and 'member'
-- (no personal runner receives them any more; members still dispatch with them).
ALTER TABLE secrets
    ADD COLUMN runners text NOT NULL DEFAULT 'workspace'
        CHECK (runners IN ('workspace', 'any')),
    ADD COLUMN dispatch text NOT NULL DEFAULT 'member'
        CHECK (dispatch IN ('member', 'admin'));

-- A job that names a 'workspace' secret (in `secrets` or as its source's credential), decided
-- at dispatch: personal runners skip it (an 'any' job; personal-pool and named-personal
-- dispatches of one are refused with 400). A constant default, so adding it rewrites nothing;
-- live jobs that name any secret are marked, since every secret is 'workspace' now.
ALTER TABLE jobs ADD COLUMN needs_workspace_runner boolean NOT NULL DEFAULT false;
UPDATE jobs SET needs_workspace_runner = true
 WHERE state IN ('parked', 'leased')
   AND (cardinality(secrets) > 0 OR source ? 'credential_secret');

-- "This runner may run this job" (0002's job_fits), now also: a job that needs a workspace
-- runner fits only a workspace runner. PL/pgSQL for the same reason as the first (the planner
-- cannot see into it, so claims keep walking their index in order); a job that names no
-- secret pays one boolean test.
CREATE FUNCTION job_fits(required text[], source_key text, needs_workspace_runner boolean,
                         capabilities text[], exclusive text[], sources text[],
                         workspace_runner boolean)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (workspace_runner OR NOT needs_workspace_runner)
       AND required <@ capabilities
       AND exclusive <@ required
       AND (source_key IS NULL OR source_key = ANY (sources));
END
$$;
