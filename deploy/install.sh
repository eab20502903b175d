#!/bin/sh
# leasehold installer, served by every replica at /install.sh. On a fresh machine:
#
#   sh -c "$(curl -fsSL https://HOST/install.sh || echo exit 1)" install.sh https://HOST/j/<short> --service
#
# (`leasehold join-code create` prints that line: when the download fails, curl says why and
# the line exits 1; `curl ... | sh` would run an empty script and exit 0). Piped into `sh -s --`
# it works too. It downloads the replica's own binary
# (/download/leasehold-<os>-<arch>), checks its SHA-256 against /download/...sha256, installs it
# as `leasehold` into LEASEHOLD_INSTALL_DIR (default /usr/local/bin as root, ~/.local/bin
# otherwise), then runs `leasehold runner connect` with every argument it was given.
#
# A self-signed replica is reached by its key pin: `--pin sha256//...` among the arguments makes
# every download here pin that key (curl --pinnedpubkey), and is handed on to
# `runner connect`. LEASEHOLD_CA_CERT (a PEM file) is trusted beside the system's CAs, here and
# by the runner.
#
# Everything is in main(), called on the last line: a script cut short (a dropped connection)
# defines at most part of a function and runs nothing.
set -eu

main() {

    say() { printf 'leasehold install: %s\n' "$*" >&2; }
    die() { say "$*"; exit 1; }

    pin=""
    join_url=""
    want_pin=no
    for arg in "$@"; do
        if [ "$want_pin" = yes ]; then
            pin=$arg
            want_pin=no
            continue
        fi
        case $arg in
            --pin) want_pin=yes ;;
            --pin=*) pin=${arg#--pin=} ;;
            [Hh][Tt][Tt][Pp][Ss]://*/j/*) join_url=$arg ;;
            [Hh][Tt][Tt][Pp]://*) die "refusing $arg: a join URL hands out a credential, so only https:// is accepted" ;;
        esac
    done
    [ -n "$join_url" ] || die "usage: sh -s -- https://HOST/j/<short> [--pin sha256//...] [runner connect flags, e.g. --service]"
    base=${join_url%/j/*}

    command -v curl >/dev/null 2>&1 || die "curl is needed"
    if [ -n "$pin" ]; then
        # The pin decides, as it does for the runner: no CA signed a self-signed certificate.
        fetch() { curl -fsSL --proto '=https' -k --pinnedpubkey "$pin" "$@"; }
    elif [ -n "${LEASEHOLD_CA_CERT:-}" ]; then
        fetch() { curl -fsSL --proto '=https' --cacert "$LEASEHOLD_CA_CERT" "$@"; }
    else
        fetch() { curl -fsSL --proto '=https' "$@"; }
    fi

    case $(uname -s) in
        Linux) os=linux ;;
        Darwin) os=macos ;;
        FreeBSD) os=freebsd ;;
        *) die "no leasehold build for $(uname -s)" ;;
    esac
    case $(uname -m) in
        x86_64 | amd64) arch=x86_64 ;;
        aarch64 | arm64) arch=aarch64 ;;
        *) arch=$(uname -m) ;;
    esac
    name="leasehold-$os-$arch"

    if [ -n "${LEASEHOLD_INSTALL_DIR:-}" ]; then
        dir=$LEASEHOLD_INSTALL_DIR
    elif [ "$(id -u)" = 0 ]; then
        dir=/usr/local/bin
    else
        [ -n "${HOME:-}" ] || die "HOME is not set: set LEASEHOLD_INSTALL_DIR"
        dir=$HOME/.local/bin
    fi
    mkdir -p "$dir"

    tmp=$(mktemp "$dir/.leasehold.XXXXXX")
    trap 'rm -f "$tmp"' EXIT
    say "downloading $base/download/$name"
    fetch -o "$tmp" "$base/download/$name" || die "$base has no $name (it serves its own platform's binary only)"
    want=$(fetch "$base/download/$name.sha256" | cut -d' ' -f1)
    if command -v sha256sum >/dev/null 2>&1; then
        got=$(sha256sum "$tmp" | cut -d' ' -f1)
    else
        got=$(shasum -a 256 "$tmp" | cut -d' ' -f1)
    fi
    [ -n "$want" ] && [ "$got" = "$want" ] || die "the download's SHA-256 is $got, the replica says $want: not installed"
    chmod 755 "$tmp"
    mv -f "$tmp" "$dir/leasehold"
    trap - EXIT
    say "installed $dir/leasehold (sha256 $got)"

    exec "$dir/leasehold" runner connect "$@"
}

main "$@"
