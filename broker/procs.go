package broker

import (
	"os"
	"runtime"
)

// MinProcs is the least GOMAXPROCS a broker process runs with.
//
// Goroutines that a fast network keeps runnable, such as chunk downloads
// from a nearby object store or the responses of a consumer replaying
// history, can occupy every P. With no more Ps than a small machine has
// cores, a goroutine the network poller readies for a hot request then
// waits in the global run queue behind them: on 2 cores the p99
// produce-to-consume latency of a hot consumer rose from about 1 ms to
// 20–170 ms during a cold replay at GOMAXPROCS=2, and stayed at 6–13 ms at
// 8 (BenchmarkTier/hot-latency, docs/benchmarks.md). More Ps than cores
// hand the choice to the kernel's scheduler, which favours threads that
// have slept, so the hot path runs promptly; on machines with at least
// MinProcs cores this changes nothing.
const MinProcs = 8

// RaiseProcs sets GOMAXPROCS to at least MinProcs, unless the GOMAXPROCS
// environment variable chose a value, and returns the value in force.
func RaiseProcs() int {
	n := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" || n >= MinProcs {
		return n
	}
	runtime.GOMAXPROCS(MinProcs)
	return MinProcs
}
