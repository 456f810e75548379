#!/bin/sh
# After install or upgrade: the rt user, its directories, the config's group, systemd.
# deb: $1 = configure, $2 = the version upgraded from (empty on a first install)
# rpm: $1 = 1 on a first install, 2 or more on an upgrade
set -e
if command -v systemd-sysusers >/dev/null 2>&1; then
    systemd-sysusers /usr/lib/sysusers.d/rt-appliance.conf
else
    getent group rt >/dev/null || groupadd --system rt
    getent passwd rt >/dev/null ||
        useradd --system --gid rt --home-dir /var/lib/rt --shell /usr/sbin/nologin rt
fi
if command -v systemd-tmpfiles >/dev/null 2>&1; then
    systemd-tmpfiles --create /usr/lib/tmpfiles.d/rt-appliance.conf
else
    install -d -m 0750 -o rt -g rt /var/lib/rt
    install -d -m 0750 -o root -g rt /etc/rt/tls
fi
# The daemons read the configuration as group rt; nobody else needs to.
chgrp rt /etc/rt/rt.yaml
chmod 0640 /etc/rt/rt.yaml

upgrade=0
case "$1" in
    configure) [ -n "$2" ] && upgrade=1 ;;
    [2-9]*) upgrade=1 ;;
esac
# Only where systemd runs (not in a chroot or an image build).
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    if [ "$upgrade" = 1 ]; then
        # Units rt apply installed and that are running now use the new version.
        for unit in rt-sequencer rt-push-client rt-pull-client; do
            systemctl try-restart "$unit.service" || true
        done
    fi
fi
exit 0
