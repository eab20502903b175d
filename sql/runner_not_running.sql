-- Of the (id, epoch) pairs a runner says it is running, those it does not hold at that epoch:
-- $1 runner id, $2 job ids, $3 epochs.
SELECT claimed.id
  FROM unnest($2::uuid[], $3::bigint[]) AS claimed (id, epoch)
 WHERE NOT EXISTS (
       SELECT 1 FROM jobs j
        WHERE j.id = claimed.id AND j.epoch = claimed.epoch
          AND j.leased_by = $1 AND j.state = 'leased')
