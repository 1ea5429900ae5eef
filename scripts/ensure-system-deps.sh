#!/bin/sh
# Installs what the daemon needs from the system when it is missing (Debian/Ubuntu as root):
# libseccomp2 (pyseccomp loads it) and a C compiler (setup.py builds the native launcher;
# without one the daemon still works, through its slower Python supervisor). Everything else
# comes from PyPI through pyproject.toml.
set -eu
[ "$(uname -s)" = Linux ] || exit 0

missing=""
have_seccomp=no
for dir in /lib /usr/lib /lib64 /usr/lib64 /lib/*-linux-gnu /usr/lib/*-linux-gnu; do
    [ -e "$dir/libseccomp.so.2" ] && have_seccomp=yes
done
[ "$have_seccomp" = yes ] || missing="$missing libseccomp2"
command -v cc >/dev/null 2>&1 || missing="$missing gcc libc6-dev"
[ -n "$missing" ] || exit 0

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing$missing" >&2
    # shellcheck disable=SC2086 # the package list is meant to split
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >&2 \
        || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >&2; }
    exit 0
fi
echo "warning: missing system packages:$missing (seccomp filters need libseccomp2; the" \
    "native launcher needs a C compiler)" >&2
