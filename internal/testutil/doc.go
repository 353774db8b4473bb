// Package testutil holds helpers shared by Sluice's tests: polling for a
// condition (Eventually), quiet logs (Logger, QuietLogs, ChildLogLevel),
// property-test settings (RapidChecks), a hand-moved clock (Clock),
// certificates (MakeCerts) and a metric's value (MetricValue). The
// embedded etcd is in etcdtest, so that tests without it do not link it.
// It is imported only from _test.go files.
package testutil
