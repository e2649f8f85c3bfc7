//go:build !linux

package supervise

// WatchExit cannot watch another process outside Linux: the channel is
// nil, and the caller waits as it would without.
func WatchExit(int) (exited <-chan struct{}, stop func()) { return nil, func() {} }
