#!/bin/sh
# A base backup of leasehold's database, run as the postgres user on the host whose Patroni
# leads (deploy/production/leasehold-backup.service, daily):
#
#   backup.sh DATABASE_URL BACKUP_ROOT [WAL_ARCHIVE]
#
# DATABASE_URL reaches the primary as a role with REPLICATION (Patroni's `replicator`), e.g.
# postgresql://replicator@10.0.0.11:5432,10.0.0.12:5432,10.0.0.13:5432/postgres?target_session_attrs=read-write
# with the password in PGPASSWORD (or ~/.pgpass), not in the URL: command lines are public.
#
# pg_basebackup copies the whole cluster while it runs, with the WAL written meanwhile
# (-X stream), so the copy is consistent on its own; pg_verifybackup then checks every file
# against the backup's manifest (SHA-256) and that the WAL it needs is there and parses. Only a
# verified backup is renamed to BACKUP_ROOT/base-<UTC time>; its path is printed. Then all but
# the newest LEASEHOLD_BACKUP_KEEP (7) backups are deleted, and, given WAL_ARCHIVE (where
# archive-wal.sh puts segments), the archived WAL older than the oldest kept backup.
#
# restore.sh brings a backup back (with the archive: up to its last segment, or a chosen time).
# PGBIN names PostgreSQL's programs (/usr/lib/postgresql/15/bin).
set -eu

[ $# -ge 2 ] && [ $# -le 3 ] || {
    echo "usage: backup.sh DATABASE_URL BACKUP_ROOT [WAL_ARCHIVE]" >&2
    exit 2
}
url=$1
root=$2
archive=${3:-}
bin=${PGBIN:-/usr/lib/postgresql/15/bin}
keep=${LEASEHOLD_BACKUP_KEEP:-7}

stamp=$(date -u +%Y%m%dT%H%M%SZ)
partial="$root/.partial-base-$stamp"
final="$root/base-$stamp"
mkdir -p "$root"
if [ -e "$final" ] || [ -e "$partial" ]; then
    echo "backup.sh: $final is already there (one backup a second at most)" >&2
    exit 1
fi
trap 'rm -rf "$partial"' EXIT
"$bin/pg_basebackup" -d "$url" -D "$partial" -X stream -c fast \
    --manifest-checksums=SHA256 -l "leasehold $stamp"
"$bin/pg_verifybackup" -q "$partial"
mv "$partial" "$final"
trap - EXIT
sync "$root"
echo "$final"

# Older backups beyond the newest $keep, then the WAL no kept backup needs.
# (base-<UTC time> names sort by time.)
ls -d "$root"/base-* | sort -r | tail -n +"$((keep + 1))" | while read -r old; do
    rm -rf "$old"
done
if [ -n "$archive" ]; then
    oldest=$(ls -d "$root"/base-* | sort | head -n 1)
    # backup_label: "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)"
    first=$(sed -n 's/^START WAL LOCATION: .*(file \([0-9A-F]*\))$/\1/p' "$oldest/backup_label")
    [ -n "$first" ] || { echo "backup.sh: no START WAL LOCATION in $oldest/backup_label" >&2; exit 1; }
    "$bin/pg_archivecleanup" "$archive" "$first"
fi
