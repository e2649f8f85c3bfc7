#!/bin/sh
# After an install or an upgrade (deb postinst, rpm %post): make systemd read
# the new unit, and restart the reaper if it was running so that it runs the
# new binary. A fresh install does not enable the reaper: it must first be
# pointed at the store the jobs use, in /etc/leasectl/leasectl.env.
[ -d /run/systemd/system ] || exit 0
systemctl daemon-reload >/dev/null 2>&1 || true
upgrade=false
case "$1" in
configure) [ -n "$2" ] && upgrade=true ;; # deb: configure OLD-VERSION
[0-9]*) [ "$1" -ge 2 ] && upgrade=true ;; # rpm: how many versions are installed
esac
if [ "$upgrade" = true ]; then
	systemctl try-restart leasectl-reaper.service >/dev/null 2>&1 || true
fi
exit 0
