#!/usr/bin/env bash
# vendor/hyper is hyper as published on crates.io plus patches/hyper.diff, nothing else
# (vendor/README.md). This script is the only way that tree is made, and the proof that it is:
#
#   scripts/vendor-hyper.sh               fetch the crate, check its sha256, extract it, apply the
#                                         patch, and replace vendor/hyper with the result
#   scripts/vendor-hyper.sh --check       build the same tree in a temporary directory and fail on
#                                         any difference from vendor/hyper (.ci/run runs this)
#   scripts/vendor-hyper.sh --write-patch write patches/hyper.diff as the difference between the
#                                         crate and vendor/hyper as it is (after resolving the
#                                         patch by hand on an upgrade)
#
# Upgrading hyper: set VERSION and SHA256 below (the sha256 is the `cksum` of that version in
# https://index.crates.io/hy/pe/hyper), run the script; see vendor/README.md.
# Needs curl, sha256sum, tar, patch and diff.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=1.12.0
SHA256=2c3e324da4c95177d6291d4c8730197c0d1822f8a9766814a4a44fa5ab797c9c
URL="https://static.crates.io/crates/hyper/hyper-$VERSION.crate"
PATCH=patches/hyper.diff
VENDOR=vendor/hyper

mode=write
case "${1:-}" in
    "") ;;
    --check) mode=check ;;
    --write-patch) mode=write-patch ;;
    *) echo "usage: $0 [--check | --write-patch]" >&2; exit 2 ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The published crate, checked against the pinned sha256 before anything reads it.
curl -fsSL --retry 3 -o "$tmp/hyper.crate" "$URL"
echo "$SHA256  $tmp/hyper.crate" | sha256sum --check --quiet - ||
    { echo "hyper-$VERSION.crate does not have the pinned sha256 $SHA256" >&2; exit 1; }
tar -xzf "$tmp/hyper.crate" -C "$tmp"
crate="$tmp/hyper-$VERSION"
[ -f "$crate/Cargo.toml" ] || { echo "the crate has no hyper-$VERSION/Cargo.toml" >&2; exit 1; }

if [ "$mode" = write-patch ]; then
    # Paths as a/<file> and b/<file>, without timestamps, so the file is the same on every run.
    mv "$crate" "$tmp/a"
    cp -a "$VENDOR" "$tmp/b"
    status=0
    (cd "$tmp" && LC_ALL=C diff -ruN a b) >"$tmp/diff" || status=$?
    [ "$status" -le 1 ] || { echo "diff failed" >&2; exit 1; }
    sed -E 's/^((---|\+\+\+) [^\t]*)\t.*$/\1/' "$tmp/diff" >"$PATCH"
    echo "wrote $PATCH ($(grep -c '^+[^+]' "$PATCH" || true) lines added, $(grep -c '^-[^-]' "$PATCH" || true) removed)"
    exit 0
fi

cp -a "$crate" "$tmp/pristine"
if ! patch -p1 -s --forward --force --no-backup-if-mismatch -d "$crate" <"$PATCH"; then
    if [ "$mode" = check ]; then
        echo "$PATCH does not apply to hyper-$VERSION" >&2
        exit 1
    fi
    echo "$PATCH does not apply cleanly to hyper-$VERSION: writing $VENDOR anyway, with the" >&2
    echo "rejected hunks beside their files (*.rej). Resolve them by hand, delete the .rej files," >&2
    echo "then run $0 --write-patch and $0 --check." >&2
fi

if [ "$mode" = check ]; then
    if ! LC_ALL=C diff -r "$crate" "$VENDOR" >"$tmp/diff"; then
        echo "$VENDOR is not hyper-$VERSION from crates.io plus $PATCH:" >&2
        sed "s|$crate|crate+patch|g" "$tmp/diff" >&2
        exit 1
    fi
    echo "$VENDOR is hyper-$VERSION (sha256 $SHA256) plus $PATCH"
    exit 0
fi

rm -rf "$VENDOR"
mkdir -p "$(dirname "$VENDOR")"
mv "$crate" "$VENDOR"
echo "wrote $VENDOR: hyper-$VERSION plus $PATCH"
