#!/usr/bin/env python3
"""Write lab.sql: the service's own hot statements as one pgbench script, one job per
transaction: park (job_insert.sql), lease as a dispatcher's tick does (BEGIN,
runners_lock_for_claim.sql, claim.sql for the runner's class, COMMIT) and complete
(job_complete.sql), each statement's text taken
from sql/ as it is, its $n parameters written as pgbench variables (so pgbench -M prepared
sends them as parameters, as a replica does). See README.md beside this file.

Usage: make_lab.py KEY_HASH_HEX > lab.sql
"""
import re
import sys
from pathlib import Path

SQL = Path(__file__).resolve().parents[2] / "sql"


def statement(name, params, gset=False):
    text = "\n".join(l for l in (SQL / name).read_text().splitlines() if not l.startswith("--"))
    # Highest first, so $1 never eats the front of $10.
    for n in sorted(params, reverse=True):
        text = re.sub(r"\$%d(?!\d)" % n, params[n], text)
    return text.rstrip().rstrip(";") + (" \\gset\n" if gset else ";\n")


key_hash = sys.argv[1]
out = []
# Per transaction: who this client is (runner r<client_id+1>, a workspace runner of 'w'), and a
# new job, as the one item of job_insert.sql's array (a UUIDv7-like id: time first, so it lands
# at the right end of the indexes). job_complete.sql's arrays carry one report.
out.append(
    "SELECT id AS rid, '\\x' || encode(token_hash, 'hex') AS th, '\\x%s' AS kh, 'w' AS ws, "
    "'ws' || chr(58) || 'w' AS own, 30000 AS seen, 120000 AS ttl, 1 AS maxj, '{}' AS res "
    "FROM runners WHERE label = 'r' || (:client_id::int + 1) \\gset\n" % key_hash
)
out.append(
    "SELECT json_build_array(json_build_object('id', (lpad(to_hex((extract(epoch from "
    "clock_timestamp())*1000)::bigint), 12, '0') || '7' || substr(md5(random()::text), 1, 19))::uuid, "
    "'pool', 'workspace', 'kind', 'command', 'payload', json_build_object('task', 'lab'), "
    "'required_capabilities', '{}'::text[], 'priority', 0, 'max_attempts', 3, "
    "'no_runner_timeout_ms', 300000, 'secrets', '{}'::text[], 'needs_workspace_runner', false))"
    "::text AS job \\gset\n"
)
out.append(statement("job_insert.sql", {1: ":kh", 2: ":job"}))
out.append("BEGIN;\n")
out.append(statement("runners_lock_for_claim.sql", {1: "ARRAY[:rid::uuid]", 2: "false"}))
# One runner of a plain workspace class, from the lanes' heads (claim.sql's header says each).
heads = "ARRAY[-1001, -1001, -1001, -1001]"
nils = "ARRAY[%s]" % ", ".join(["'00000000-0000-0000-0000-000000000000'::uuid"] * 4)
out.append(statement("claim.sql",
                     {1: "ARRAY[:rid::uuid]", 2: "ARRAY[:maxj::integer]",
                      3: "ARRAY[NULL::timestamptz]", 4: "ARRAY[false]", 5: ":ttl",
                      6: heads, 7: nils, 8: "false", 9: ":ws", 10: ":own",
                      11: "'{}'::text[]", 12: "'{}'::text[]", 13: "'{}'::text[]"},
                     gset=True))
out.append("COMMIT;\n")
# A claim that took nothing (another client took its job) leaves id and epoch empty.
out.append(statement("job_complete.sql", {1: "ARRAY[NULLIF(:id, '')::uuid]",
                                         2: "ARRAY[NULLIF(:epoch, '')::bigint]",
                                         3: "ARRAY[:th::bytea]", 4: "ARRAY[:res::jsonb]",
                                         5: ":seen"}))
sys.stdout.write("".join(out))
