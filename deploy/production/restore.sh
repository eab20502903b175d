#!/bin/sh
# Bring a base backup made by backup.sh back into an empty data directory, as the postgres
# user, with nothing else running on it (docs/operations.md, "Backup and restore"):
#
#   restore.sh BACKUP_DIR DATA_DIR [WAL_ARCHIVE [TARGET_TIME]]
#
# It checks the backup (pg_verifybackup), copies it into DATA_DIR (mode 0700), and runs
# PostgreSQL there on a private Unix socket only (no TCP: no replica or client can reach it
# meanwhile, and archiving is off) until it has replayed: the backup's own WAL; with
# WAL_ARCHIVE, then every archived segment after it (to the end of the archive, or up to
# TARGET_TIME, an ISO 8601 time such as 2026-12-04T09:30:00Z, for a point in time before a
# mistake); then it ends recovery on a new timeline and stops cleanly. DATA_DIR is then an
# ordinary primary's data directory: start it under Patroni (which takes it over) or pg_ctl.
#
# PGBIN names PostgreSQL's programs (/usr/lib/postgresql/15/bin); LEASEHOLD_RESTORE_TIMEOUT
# bounds the replay, in seconds (86400).
set -eu

die() {
    echo "restore.sh: $*" >&2
    exit 1
}
[ $# -ge 2 ] && [ $# -le 4 ] || {
    echo "usage: restore.sh BACKUP_DIR DATA_DIR [WAL_ARCHIVE [TARGET_TIME]]" >&2
    exit 2
}
backup=$1
data=$2
archive=${3:-}
target=${4:-}
bin=${PGBIN:-/usr/lib/postgresql/15/bin}
timeout=${LEASEHOLD_RESTORE_TIMEOUT:-86400}

# The paths go into server settings unquoted: keep them plain.
for p in "$data" "$archive"; do
    case $p in *[!A-Za-z0-9/._-]*) die "use a path of letters, digits and / . _ - only: $p" ;; esac
done
case $target in *[!0-9T:.Z+-]*) die "TARGET_TIME is an ISO 8601 time, e.g. 2026-12-04T09:30:00Z" ;; esac
# The server reads the setting before it knows time zone names, "Z" among them: a number.
case $target in *Z) target="${target%Z}+00:00" ;; esac
[ -z "$target" ] || [ -n "$archive" ] || die "a TARGET_TIME needs the WAL_ARCHIVE"
if [ -e "$data" ] && [ -n "$(ls -A "$data")" ]; then
    die "$data is not empty: move it aside first"
fi

"$bin/pg_verifybackup" -q "$backup"
mkdir -p "$data"
chmod 0700 "$data"
cp -R "$backup/." "$data/"
rm -f "$data/backup_manifest" "$data/standby.signal" "$data/recovery.signal"

sock=$(mktemp -d)
log="$sock/postgres.log"
trap 'rm -rf "$sock"' EXIT
opts="-c listen_addresses= -c unix_socket_directories=$sock -c archive_mode=off"
if [ -n "$archive" ]; then
    # Archive recovery: every segment the archive has after the backup, then promotion.
    touch "$data/recovery.signal"
    opts="$opts -c restore_command='cp $archive/%f %p' -c recovery_target_action=promote"
    [ -z "$target" ] || opts="$opts -c recovery_target_time=$target"
fi
"$bin/pg_ctl" -D "$data" -l "$log" -o "$opts" -w -t "$timeout" start >/dev/null ||
    { cat "$log" >&2; die "PostgreSQL did not start on the backup"; }

# Recovery is over once the server has left it: recovery.signal gone and the control file
# saying "in production".
waited=0
until [ ! -e "$data/recovery.signal" ] &&
    "$bin/pg_controldata" "$data" | grep -q '^Database cluster state: *in production$'; do
    if ! "$bin/pg_ctl" -D "$data" status >/dev/null; then
        cat "$log" >&2
        die "PostgreSQL stopped before recovery ended (a TARGET_TIME past the archive's end?)"
    fi
    [ "$waited" -lt "$timeout" ] || die "recovery did not end within $timeout s (log: $log)"
    sleep 1
    waited=$((waited + 1))
done
"$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
timeline=$("$bin/pg_controldata" "$data" | sed -n "s/^Latest checkpoint's TimeLineID: *//p")
echo "restored $backup into $data (timeline $timeline)"
