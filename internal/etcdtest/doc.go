// Package etcdtest starts real etcd members (the etcd binary, Debian's
// etcd-server package) on loopback for tests: one member for the store's
// contract tests, three for the coordinator's high-availability tests,
// with a member that can be stopped and restarted to cut a coordinator off
// or roll the cluster.
//
// Lifecycle: Start registers cleanups with the test, so members end with
// it. Shared is one member for every test of a test binary that needs
// one member and never stops it, each test under its own Prefix; the
// package's TestMain stops it (RunShared). A machine without etcd skips the test, unless CI is set (then a
// missing etcd fails it: CI installs etcd-server). Members use short
// heartbeat and election timeouts (50 ms, 500 ms) so that elections and
// the lease TTL floor (1 s) fit tests.
package etcdtest
