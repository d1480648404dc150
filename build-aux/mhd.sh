#!/bin/sh
# build-aux/mhd.sh DIR: libmicrohttpd 1.0.1 as a static library (DIR/lib/libmicrohttpd.a) and
# its header (DIR/include/microhttpd.h), built from Debian's source tarball (the .orig of
# trixie's libmicrohttpd 1.0.1-4; Debian's patches touch only the manual page and the tests).
# s3cached links it instead of bookworm's 0.9.75, which reads a bare LF as the end of a chunk
# line and cannot be told not to (docs/security.md, "Request framing"); 1.0.1 refuses it at
# MHD_OPTION_CLIENT_DISCIPLINE_LVL 1. The patches in build-aux/mhd-patches/ are applied in
# order (each says what it fixes); DIR/VERSION names them (and a hash of their text), and the
# script does nothing when DIR already holds this version with these patches.
#
# The tarball: $MHD_TARBALL if set, else DIR.tar.gz if present, else downloaded from the pool
# of the Debian mirror apt is configured with (or $MHD_MIRROR), and checked against its
# SHA-256 from Debian's .dsc. Needs a C compiler, make, curl and libgnutls28-dev.
set -eu
VERSION=1.0.1
PATCHES=$(cd "$(dirname "$0")/mhd-patches" && ls *.patch 2>/dev/null | sort)
PATCHDIR=$(cd "$(dirname "$0")/mhd-patches" && pwd)
# the patches by name and content: an edited patch rebuilds the library
STAMP="$VERSION $(echo $PATCHES) $(cd "$PATCHDIR" && cat $PATCHES </dev/null | sha256sum | cut -c1-12)"
SHA256=a89e09fc9b4de34dde19f4fcb4faaa1ce10299b9908db1132bbfa1de47882b94
DIR=${1:?usage: build-aux/mhd.sh DIR}

[ "$(cat "$DIR/VERSION" 2>/dev/null)" = "$STAMP" ] && [ -f "$DIR/lib/libmicrohttpd.a" ] &&
    exit 0
tarball=${MHD_TARBALL:-$DIR.tar.gz}
if ! echo "$SHA256  $tarball" | sha256sum -c --status 2>/dev/null; then
    mirror=${MHD_MIRROR:-$(apt-get indextargets --format '$(REPO_URI)' 'Label: Debian' \
        'Created-By: Packages' 2>/dev/null | head -n 1)}
    [ -n "$mirror" ] || {
        echo "mhd.sh: no Debian mirror in apt's lists (apt-get update), set MHD_MIRROR" \
            "or MHD_TARBALL" >&2
        exit 1
    }
    url="${mirror%/}/pool/main/libm/libmicrohttpd/libmicrohttpd_$VERSION.orig.tar.gz"
    echo "mhd.sh: fetching $url"
    mkdir -p "$(dirname "$DIR")"
    curl -fsS --retry 3 -m 120 -o "$DIR.tar.gz.part" "$url"
    mv "$DIR.tar.gz.part" "$DIR.tar.gz"
    tarball=$DIR.tar.gz
    echo "$SHA256  $tarball" | sha256sum -c --status || {
        echo "mhd.sh: $tarball: SHA-256 is not $SHA256" >&2
        exit 1
    }
fi

rm -rf "$DIR" "$DIR.src"
mkdir -p "$DIR.src"
tar -xzf "$tarball" -C "$DIR.src" --strip-components=1
for p in $PATCHES; do
    patch -s -p1 -d "$DIR.src" <"$PATCHDIR/$p" || {
        echo "mhd.sh: $p does not apply" >&2
        exit 1
    }
done
prefix=$(cd "$DIR.src/.." && pwd)/$(basename "$DIR")
# Only what server.c uses: epoll, threads, TLS through GnuTLS, sendfile. Built by its own
# make (the caller's jobserver is not passed on).
(
    cd "$DIR.src"
    unset MAKEFLAGS MFLAGS MAKELEVEL
    ./configure --quiet --prefix="$prefix" --disable-shared --enable-static \
        --disable-doc --disable-examples --disable-tools --disable-curl \
        --disable-postprocessor --disable-bauth --disable-dauth --disable-cookie \
        --disable-httpupgrade --enable-https --with-gnutls --enable-epoll \
        CFLAGS="-O2 -g" >configure.out 2>&1 || {
        tail -30 configure.out
        exit 1
    }
    make -s -j"$(nproc 2>/dev/null || echo 2)" -C src/microhttpd >make.out 2>&1 || {
        tail -30 make.out
        exit 1
    }
    make -s -C src/microhttpd install >/dev/null
    make -s -C src/include install >/dev/null
)
rm -rf "$DIR.src" "$prefix/lib/libmicrohttpd.la" "$prefix/lib/pkgconfig"
echo "$STAMP" >"$DIR/VERSION"
echo "mhd.sh: libmicrohttpd $STAMP in $DIR"
