-- How far retention has deleted a workspace's feed: $1 workspace. The transaction id (as
-- bigint) of the newest event deleted; no row while none was. A cursor below it answers
-- 410 gone (migration 0050).
SELECT xid::text::bigint AS xid FROM feed_pruned WHERE workspace = $1
