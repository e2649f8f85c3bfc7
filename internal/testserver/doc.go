// Package testserver ties the life of a test server (a redistest.Server, an
// etcdtest.Cluster, a pgtest.Server) to the tests that use it: shared by a
// package's tests, started and stopped around them by TestMain, or owned by
// one test and stopped when it ends. It is imported only by tests.
//
// It does not start servers itself, nor choose their ports: the packages
// that start them do.
package testserver
