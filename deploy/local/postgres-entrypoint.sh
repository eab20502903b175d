#!/bin/sh
# The official postgres image's entrypoint, the part docker-compose.yml uses, for the local
# stand-in image (deploy/local/README.md): on an empty $PGDATA, initdb as uid 999 with
# POSTGRES_USER and the password read from POSTGRES_PASSWORD_FILE, password (scram) logins from
# the network, the database POSTGRES_DB; then run PostgreSQL as uid 999.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
# Started without waiting for `init` (deploy/local/compose.podman.yml): wait for its password.
i=0
until [ -s "$POSTGRES_PASSWORD_FILE" ]; do
    i=$((i + 1))
    [ "$i" -le 120 ] || { echo "no $POSTGRES_PASSWORD_FILE after 60 s" >&2; exit 1; }
    sleep 0.5
done
mkdir -p "$PGDATA" /run/postgresql
chown 999:999 "$PGDATA" /run/postgresql
chmod 0700 "$PGDATA"
as_pg() { setpriv --reuid=999 --regid=999 --clear-groups "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    as_pg initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$POSTGRES_PASSWORD_FILE" \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    as_pg pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    as_pg psql -U "$POSTGRES_USER" -d postgres -v ON_ERROR_STOP=1 \
        -c "CREATE DATABASE \"$POSTGRES_DB\"" >/dev/null
    as_pg pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec setpriv --reuid=999 --regid=999 --clear-groups postgres -D "$PGDATA"
