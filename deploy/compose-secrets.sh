#!/bin/sh
# docker compose's credentials: generated at first start, kept in volumes only PostgreSQL, the
# replicas and the bootstrap mount (never the runner, whose jobs are hostile), and never written
# in docker-compose.yml.
#   init:       the one-shot `init` service (root, no network). Writes a random database
#               password (24 bytes, hex) to $LEASEHOLD_DB_PASSWORD_FILE and a secrets key
#               (32 random bytes, base64: LEASEHOLD_SECRETS_KEY) to $LEASEHOLD_SECRETS_KEY_FILE,
#               each mode 0600 in a 0700 directory, owned by $LEASEHOLD_SECRETS_OWNER when set.
#               A value already there is kept (PostgreSQL takes the password only when it
#               creates its database, and secrets sealed under the key need that key); one that
#               is not what this script writes stops it.
#   run CMD...: the replicas and the bootstrap. Puts the password into DATABASE_URL (given as
#               scheme://USER@HOST..., without one), exports LEASEHOLD_SECRETS_KEY from
#               $LEASEHOLD_SECRETS_KEY_FILE when that is set, and execs CMD.
set -eu
umask 077

die() {
    echo "compose-secrets.sh: $*" >&2
    exit 1
}

valid_password() {
    case "$1" in '' | *[!0-9a-f]*) return 1 ;; esac
    [ "${#1}" -eq 48 ]
}

valid_key() {
    case "$1" in '' | *[!A-Za-z0-9+/=]*) return 1 ;; esac
    [ "${#1}" -eq 44 ]
}

new_password() { head -c 24 /dev/urandom | od -An -v -tx1 | tr -d ' \n'; }
new_key() { head -c 32 /dev/urandom | base64 | tr -d '\n'; }

# generate FILE VALIDATOR MAKER: FILE keeps its value, or gets MAKER's, written atomically.
generate() {
    file=$1
    dir=$(dirname "$file")
    mkdir -p "$dir"
    chmod 700 "$dir"
    if [ -e "$file" ]; then
        "$2" "$(cat "$file")" || die "$file is not what init writes; remove it to make another"
    else
        value=$("$3")
        "$2" "$value" || die "could not generate $file"
        printf %s "$value" >"$file.tmp"
        mv "$file.tmp" "$file"
        echo "generated $file"
    fi
    chmod 600 "$file"
    if [ -n "${LEASEHOLD_SECRETS_OWNER:-}" ]; then
        chown "$LEASEHOLD_SECRETS_OWNER" "$dir" "$file"
    fi
}

case "${1:-}" in
init)
    generate "${LEASEHOLD_DB_PASSWORD_FILE:?set LEASEHOLD_DB_PASSWORD_FILE}" \
        valid_password new_password
    generate "${LEASEHOLD_SECRETS_KEY_FILE:?set LEASEHOLD_SECRETS_KEY_FILE}" valid_key new_key
    ;;
run)
    shift
    [ "$#" -gt 0 ] || die "usage: compose-secrets.sh run COMMAND [ARG...]"
    password=$(cat "${LEASEHOLD_DB_PASSWORD_FILE:?set LEASEHOLD_DB_PASSWORD_FILE}") \
        || die "cannot read $LEASEHOLD_DB_PASSWORD_FILE"
    valid_password "$password" || die "$LEASEHOLD_DB_PASSWORD_FILE is not what init writes"
    url=${DATABASE_URL:?set DATABASE_URL (scheme://USER@HOST:PORT/DB, no password)}
    case "$url" in *://*@*) ;; *) die "DATABASE_URL names no user: scheme://USER@HOST..." ;; esac
    scheme=${url%%://*}
    rest=${url#*://}
    user=${rest%%@*}
    case "$user" in '' | *[:/]*) die "DATABASE_URL must name a user and no password" ;; esac
    DATABASE_URL="$scheme://$user:$password@${rest#*@}"
    export DATABASE_URL
    if [ -n "${LEASEHOLD_SECRETS_KEY_FILE:-}" ]; then
        key=$(cat "$LEASEHOLD_SECRETS_KEY_FILE") || die "cannot read $LEASEHOLD_SECRETS_KEY_FILE"
        valid_key "$key" || die "$LEASEHOLD_SECRETS_KEY_FILE is not what init writes"
        LEASEHOLD_SECRETS_KEY=$key
        export LEASEHOLD_SECRETS_KEY
    fi
    unset password key url rest user scheme
    exec "$@"
    ;;
*)
    echo "usage: compose-secrets.sh init | run COMMAND [ARG...]" >&2
    exit 2
    ;;
esac
