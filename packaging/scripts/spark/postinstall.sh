#!/bin/sh
# rt-appliance-spark, after install or upgrade: systemd rereads the units; on an
# upgrade the Spark units `rt apply` installed and that run now use the new version.
# deb: $1 = configure, $2 = the version upgraded from (empty on a first install)
# rpm: $1 = 1 on a first install, 2 or more on an upgrade
set -e
upgrade=0
case "$1" in
    configure) [ -n "$2" ] && upgrade=1 ;;
    [2-9]*) upgrade=1 ;;
esac
# Only where systemd runs (not in a chroot or an image build).
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    if [ "$upgrade" = 1 ]; then
        for unit in rt-spark-master rt-spark-pipeline rt-spark-worker; do
            systemctl try-restart "$unit.service" || true
        done
    fi
fi
exit 0
