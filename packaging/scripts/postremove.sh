#!/bin/sh
# After removal. Remove keeps data, configuration and certificates. Purge (deb) also
# deletes the configuration and the units `rt apply` wrote; /var/lib/rt (data) and
# /etc/rt/tls (keys) stay until an operator deletes them.
set -e
case "$1" in
    purge)
        rm -f /etc/rt/rt.yaml
        for unit in /etc/systemd/system/rt-*.service; do
            [ -f "$unit" ] || continue
            if head -n 1 "$unit" | grep -q '^# Written by `rt apply`'; then
                rm -f "$unit" "/etc/systemd/system/multi-user.target.wants/${unit##*/}"
            fi
        done
        rmdir /etc/rt 2>/dev/null || true
        if [ -d /run/systemd/system ]; then
            systemctl daemon-reload || true
        fi
        ;;
esac
exit 0
