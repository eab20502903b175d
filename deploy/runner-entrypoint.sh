#!/bin/sh
# docker compose's bootstrap and runner services.
#   bootstrap: mint the admin key (printed once, here) and a workspace join code for the runner.
#   runner:    enrol with that code once, then run; its credentials persist in its volume.
#              It runs as root (to start each job as an unprivileged uid of its own).
set -eu
shared=/var/lib/leasehold/bootstrap
wait_ready() {
    until curl -fsS "$LEASEHOLD_SERVER/readyz" >/dev/null 2>&1; do sleep 1; done
}
case "${1:-}" in
bootstrap)
    wait_ready
    if [ -s "$shared/join-code" ]; then
        echo "already bootstrapped; the admin key was printed on the first run"
        exit 0
    fi
    key=$(leasehold admin create-key --workspace demo --subject admin --role admin | tail -n 1)
    echo "admin key for workspace 'demo' (shown once): $key"
    # Replicas may still be starting (the balancer's checks flap while they reach the
    # database): ask again until a code comes back, and never leave an empty one.
    code=""
    tries=0
    until [ -n "$code" ]; do
        code=$(LEASEHOLD_API_KEY=$key leasehold join-code create --workspace --ttl 600 --json \
            | sed -n 's/.*"code": *"\([^"]*\)".*/\1/p') || code=""
        if [ -z "$code" ]; then
            tries=$((tries + 1))
            if [ "$tries" -ge 120 ]; then
                echo "no join code after $tries tries" >&2
                exit 1
            fi
            sleep 1
        fi
    done
    printf '%s\n' "$code" > "$shared/join-code.tmp"
    mv "$shared/join-code.tmp" "$shared/join-code"
    ;;
runner)
    config=/var/lib/leasehold/runner/runner.json
    wait_ready
    if [ ! -f "$config" ]; then
        until [ -s "$shared/join-code" ]; do sleep 1; done
        # The balancer may still flap while replicas start: enrol again until it answers (a
        # refused enrolment does not use the code up).
        tries=0
        until leasehold runner connect "$(cat "$shared/join-code")" --server "$LEASEHOLD_SERVER" \
            --label compose-runner --capacity 2 --capability linux --config "$config"; do
            tries=$((tries + 1))
            [ "$tries" -lt 60 ] || exit 1
            sleep 2
        done
    fi
    # Each job runs as a uid of its own from 60000-60063 (one per slot), which cannot read the
    # token, another job's environment or directory, and whose processes all die with the job
    # (containers rarely allow the user namespaces bubblewrap needs); the runner checks the
    # token is out of reach at start and refuses otherwise.
    exec leasehold runner run --config "$config" --job-user-range 60000-60063 \
        --work-dir /var/lib/leasehold-jobs
    ;;
*)
    echo "usage: runner-entrypoint.sh bootstrap|runner" >&2
    exit 2
    ;;
esac
