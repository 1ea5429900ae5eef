#!/bin/sh
# Installs the system libraries the daemon needs when they are missing (Debian/Ubuntu as
# root). Everything else comes from PyPI through pyproject.toml.
set -eu
[ "$(uname -s)" = Linux ] || exit 0
for dir in /lib /usr/lib /lib64 /usr/lib64 /lib/*-linux-gnu /usr/lib/*-linux-gnu; do
    [ -e "$dir/libseccomp.so.2" ] && exit 0
done
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing libseccomp2 (needed by pyseccomp)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libseccomp2 >&2 \
        || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libseccomp2 >&2; }
    exit 0
fi
echo "warning: libseccomp.so.2 not found; install libseccomp2 (seccomp filters need it)" >&2
