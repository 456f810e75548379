#!/bin/sh
# Before removal (not before an upgrade): stop the daemons whose program goes away.
# deb: $1 = remove | upgrade | deconfigure;  rpm: $1 = 0 on erase, 1 on upgrade
set -e
case "$1" in
    remove | 0)
        if [ -d /run/systemd/system ]; then
            # rt-push-server and rt-pull-server: a node's units before rt node
            systemctl stop rt-pull-client.service rt-push-client.service \
                rt-pull-server.service rt-sequencer.service rt-push-server.service || true
        fi
        ;;
esac
exit 0
