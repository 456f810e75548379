#!/bin/sh
# rt-appliance-spark, before removal (not before an upgrade): stop the Spark units,
# whose program goes away. Their output and checkpoints in the data directory stay.
# deb: $1 = remove | upgrade | deconfigure;  rpm: $1 = 0 on erase, 1 on upgrade
set -e
case "$1" in
    remove | 0)
        if [ -d /run/systemd/system ]; then
            systemctl stop rt-spark-pipeline.service rt-spark-worker.service rt-spark-master.service || true
        fi
        ;;
esac
exit 0
