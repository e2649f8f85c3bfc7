// Package packaging holds what the deb and rpm packages install besides the
// binary: the systemd units of the reaper and of the registry (`leasectl
// serve`), their environment files, the registry's tokens file, the install
// scripts, and the alerting rules (prometheus/) and dashboard (grafana/)
// for the reaper's metrics. It has no Go code; its test checks these files and
// .goreleaser.yaml against each other and against the cmd package, which
// `goreleaser check` cannot do.
package packaging
