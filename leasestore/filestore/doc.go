// Package filestore is leasectl's embedded store: a file per job in a local
// folder, shared by every leasectl process on one host through a lock per
// job, with release notifications through the file system (inotify,
// kqueue). It registers the file:// scheme, and serves leasestore.Open's
// empty URL from leasestore.StateDir.
//
// It guarantees what leasestore.Store promises, on one host, and that an
// operation on one job never waits for another job's: a process stopped
// inside an operation holds up that job alone, and reads never wait. The
// files are written without fsync (see file.go): a killed process loses
// nothing, a host crash can lose the last writes.
package filestore
