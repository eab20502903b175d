#!/bin/sh
# PostgreSQL's archive_command on leasehold's Patroni cluster (deploy/patroni.yml):
#
#   archive_command: "/usr/local/lib/leasehold/archive-wal.sh %p /srv/leasehold-backup/wal/%f"
#
# Copies one finished WAL segment (or timeline history file) into the archive, a directory on
# storage outside the three database hosts, mounted at the same path on each. PostgreSQL runs
# it as the postgres user from the data directory, retries it until it exits 0, and recycles
# the segment only after that; so it exits 0 only once the file is durably in the archive:
# copied under a temporary name, flushed, renamed, the directory flushed. A file already
# archived with the same bytes (a retry after a crash between the copy and PostgreSQL's own
# bookkeeping) is success; other bytes under the same name are an error, never overwritten
# (two clusters archiving to one directory).
set -eu

[ $# -eq 2 ] || { echo "usage: archive-wal.sh SEGMENT_PATH ARCHIVE_PATH" >&2; exit 2; }
src=$1
dest=$2

if [ -e "$dest" ]; then
    if cmp -s "$src" "$dest"; then
        exit 0
    fi
    echo "archive-wal: $dest is already archived with other contents; not overwriting it" >&2
    exit 1
fi
tmp="$dest.partial.$$"
trap 'rm -f "$tmp"' EXIT
cp "$src" "$tmp"
sync "$tmp"
mv "$tmp" "$dest"
trap - EXIT
sync "$(dirname "$dest")"
