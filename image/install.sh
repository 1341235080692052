#!/bin/sh
# /install DEST: copies this image's libalnair.so and training-side Python package to DEST/<version>
# (docs/image.md). The copy is made under a temporary name in DEST and renamed into place, so a workload
# sees all of a version or none of it; a version already there is left as it is, so an init container
# may run this on every start. Nothing outside DEST/<version> is written.
set -eu

if [ $# -ne 1 ]; then
    echo "usage: /install DEST" >&2
    exit 2
fi
dest=$1
version=$(cat /alnair/VERSION)
target=$dest/$version

if [ ! -d "$dest" ]; then
    echo "install: $dest is not a directory" >&2
    exit 2
fi
if [ -d "$target" ]; then
    echo "install: $target is already installed"
    exit 0
fi

tmp=$(mktemp -d "$dest/.$version.tmp-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM  # so that the EXIT trap removes the partial copy
cp -R /alnair/lib /alnair/python "$tmp/"
chmod -R u=rwX,go=rX "$tmp"  # directories 0755, files readable by every workload's user
# rename(2) refuses a non-empty directory: of installers racing on one node, the first one's copy stays.
if failed=$(mv -T "$tmp" "$target" 2>&1); then
    trap - EXIT
    echo "install: installed $target"
elif [ -d "$target" ]; then
    echo "install: $target is already installed"
else
    echo "install: $failed" >&2
    exit 1
fi
