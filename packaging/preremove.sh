#!/bin/sh
# Before the package is removed (deb prerm, rpm %preun), but not when it is
# upgraded: stop the reaper and the registry, and disable them.
case "$1" in
remove | 0) ;; # deb: remove; rpm: no version left after this one
*) exit 0 ;;
esac
if [ -d /run/systemd/system ]; then
	systemctl stop leasectl-reaper.service leasectl-registry.service >/dev/null 2>&1 || true
fi
if command -v systemctl >/dev/null 2>&1; then
	systemctl disable leasectl-reaper.service leasectl-registry.service >/dev/null 2>&1 || true
fi
exit 0
