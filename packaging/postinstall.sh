#!/bin/sh
# After an install or an upgrade (deb postinst, rpm %post): make systemd read
# the new units, and restart the reaper and the registry if they were running
# so that they run the new binary. A fresh install enables neither: each must
# first be pointed at the store the jobs use (/etc/leasectl/leasectl.env,
# /etc/leasectl/registry.env), and the registry given its tokens.
[ -d /run/systemd/system ] || exit 0
systemctl daemon-reload >/dev/null 2>&1 || true
upgrade=false
case "$1" in
configure) [ -n "$2" ] && upgrade=true ;; # deb: configure OLD-VERSION
[0-9]*) [ "$1" -ge 2 ] && upgrade=true ;; # rpm: how many versions are installed
esac
if [ "$upgrade" = true ]; then
	systemctl try-restart leasectl-reaper.service leasectl-registry.service >/dev/null 2>&1 || true
fi
exit 0
