#!/bin/sh
# After a removal or an upgrade (deb postrm, rpm %postun): let systemd forget
# or re-read the unit. The store's data in /var/lib/leasectl is kept: it holds
# quarantine state and history that a reinstall should find again.
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
