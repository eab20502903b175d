-- Store new verdicts: $1 runner ids, $2 outdated flags.
UPDATE runners r SET outdated = v.outdated
  FROM unnest($1::uuid[], $2::boolean[]) AS v(id, outdated)
 WHERE r.id = v.id AND r.outdated IS DISTINCT FROM v.outdated
