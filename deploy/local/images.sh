#!/bin/sh
# Make the images docker-compose.yml needs from Debian's packages alone, for a machine that
# reaches no image registry (CI; tests/it/compose.rs): one root file system made with
# mmdebstrap (PostgreSQL 15, HAProxy, curl, CA certificates, and the host-built `leasehold`
# binary BIN with the compose scripts), imported as
#   localhost/leasehold:dev             what the shipped deploy/Dockerfile builds (uid 999)
#   localhost/leasehold-postgres:15     stands in for postgres:15 (deploy/local/postgres-entrypoint.sh)
#   localhost/leasehold-haproxy:2.8     stands in for haproxy:2.8
# Then: podman-compose -f docker-compose.yml -f deploy/local/compose.podman.yml up -d --no-build
# Usage: deploy/local/images.sh BIN   (BIN: a leasehold binary built on this Debian 12 host)
set -eu
bin=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
deploy=$(dirname "$here")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$bin" "$work/leasehold"
# uid 999 is `postgres` here, as in the postgres image, and the user leasehold runs as, as in
# deploy/Dockerfile: the generated credentials (compose-secrets.sh) are files of that uid.
mmdebstrap --quiet --variant=minbase \
    --include=ca-certificates,curl,postgresql-15,haproxy \
    --essential-hook='echo "postgres:x:999:999:PostgreSQL administrator:/var/lib/postgresql:/bin/sh" >> "$1/etc/passwd"; echo "postgres:x:999:" >> "$1/etc/group"' \
    --customize-hook="copy-in $work/leasehold $deploy/runner-entrypoint.sh $deploy/compose-secrets.sh $here/postgres-entrypoint.sh /usr/local/bin" \
    --customize-hook='mkdir -p "$1/var/lib/leasehold/bootstrap" "$1/var/lib/leasehold/runner" "$1/usr/local/etc/haproxy" && chown -R 999:999 "$1/var/lib/leasehold"' \
    bookworm "$work/rootfs.tar"
path=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
# The images these tags name now, removed once the new ones take the tags (each run would
# otherwise leave three untagged 600 MB images behind).
old=""
for tag in localhost/leasehold:dev localhost/leasehold-postgres:15 localhost/leasehold-haproxy:2.8; do
    old="$old $(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
done
podman import --quiet \
    --change "ENV PATH=$path" --change 'USER 999' --change 'WORKDIR /var/lib/leasehold' \
    --change 'ENTRYPOINT ["leasehold"]' --change 'CMD ["serve", "--listen", "0.0.0.0:8080"]' \
    "$work/rootfs.tar" localhost/leasehold:dev >/dev/null
podman import --quiet \
    --change "ENV PATH=/usr/lib/postgresql/15/bin:$path" \
    --change 'ENV PGDATA=/var/lib/postgresql/data' \
    --change 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]' \
    "$work/rootfs.tar" localhost/leasehold-postgres:15 >/dev/null
podman import --quiet --change "ENV PATH=$path" \
    --change 'CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]' \
    "$work/rootfs.tar" localhost/leasehold-haproxy:2.8 >/dev/null
for id in $old; do
    podman rmi "$id" >/dev/null 2>&1 || true
done
