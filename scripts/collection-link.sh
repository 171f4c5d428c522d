#!/usr/bin/env bash
# Create build/collections/ansible_collections/leaseguard/deploy -> ../../../.. (the repository
# root), so that ansible.cfg's collections_path finds leaseguard.deploy in the working tree.
#
# The link lives under the git-ignored build/ directory only: a tracked link to the repository's
# own root sends tree-walking tools into a loop. Idempotent and silent when the link is already
# right; replaces a wrong link; refuses to touch anything that is not a link.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
parent="$root/build/collections/ansible_collections/leaseguard"
link="$parent/deploy"
# Relative to the link's own directory (build/collections/ansible_collections/leaseguard), so
# the link survives moving the tree.
target="../../../.."

if [[ -L "$link" && "$(readlink "$link")" == "$target" ]]; then
    exit 0
fi

if [[ -e "$link" && ! -L "$link" ]]; then
    echo "collection-link: $link exists and is not a symlink; remove it first" >&2
    exit 1
fi

mkdir -p "$parent"
ln -sfn "$target" "$link"

if [[ "$(cd "$link" && pwd -P)" != "$root" ]]; then
    echo "collection-link: $link does not resolve to $root" >&2
    exit 1
fi

echo "collection-link: $link -> $target"
