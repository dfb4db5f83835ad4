package main

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFailoverStallDefaultClient measures what a producer with franz-go's
// default settings sees when a partition leader goes away: the longest
// gap in acknowledgements across the partitions, per round, for a kill -9
// of a leader that is not the controller and for a controlled shutdown
// (SIGTERM) of one. It asserts only that producing resumes; the figures
// are printed for docs/benchmarks.md. It takes a minute or two, so it runs
// only with STRATA_FAILOVER_STALL set to the number of rounds of each:
//
//	STRATA_FAILOVER_STALL=5 go test ./cmd/strata -run TestFailoverStallDefaultClient -v
func TestFailoverStallDefaultClient(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("STRATA_FAILOVER_STALL"))
	if rounds <= 0 {
		t.Skip("set STRATA_FAILOVER_STALL=<rounds> to measure the produce stall of a leader failover")
	}
	c := startCluster(t, 3, clusterSettings{})
	const topic = "stall"
	c.createTopic(topic, 3, 3, configs("min.insync.replicas", "2"))
	// franz-go's default MetadataMinAge is 5 s; startLoad lowers it for
	// the fault tests, and this option puts the default back.
	l := startLoad(t, c, topic, 3, 1, 200, kgo.MetadataMinAge(5*time.Second))
	l.waitAcked(c, 200, 30*time.Second)

	measure := func(kind string, stop func(int32)) {
		var stalls []time.Duration
		for round := range rounds {
			ps := c.waitISR(topic, time.Minute)
			ctrl := c.waitController()
			victim := int32(-1)
			for id, n := range leaders(ps) {
				if id != ctrl && n > 0 && (victim < 0 || id < victim) {
					victim = id
				}
			}
			if victim < 0 {
				// Every leader is the controller's: take it, and say so.
				victim = ctrl
			}
			at := time.Now()
			stop(victim)
			l.waitResumed(c, at, time.Minute)
			worst, p, _ := l.stall(at, time.Now())
			stalls = append(stalls, worst)
			t.Logf("%s round %d: node %d (controller %d, leading %d of 3): longest produce stall %s (partition %d)",
				kind, round+1, victim, ctrl, leaders(ps)[victim], worst.Round(time.Millisecond), p)
			c.restart(victim)
			c.waitISR(topic, time.Minute)
			l.waitAcked(c, 100, 30*time.Second)
		}
		slices.Sort(stalls)
		t.Logf("%s: median stall %s over %d rounds (min %s, max %s)", kind,
			stalls[len(stalls)/2].Round(time.Millisecond), len(stalls),
			stalls[0].Round(time.Millisecond), stalls[len(stalls)-1].Round(time.Millisecond))
	}
	measure("kill -9", c.kill)
	measure("SIGTERM", c.term)
	checkLoad(t, c, l, topic)
}
