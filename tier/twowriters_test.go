package tier

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"strata/tier/format"
	"strata/tier/objstore"
)

// TestTwoWritersNeverLoseAPublishedSegment is the fault test of issue 9's
// "done when": two writers of one partition on one store, the leader of
// epoch 3 and, from a takeover on, the leader of epoch 5, while the
// deposed one carries on as if it still led. In random order they upload
// (the same replicated segments), apply retention and collect orphans,
// with the clock moving and the store failing calls and losing replies.
// After every step:
//   - the bucket's current manifest covers every offset that a leader in
//     office was told is published and that its retention kept, and every
//     object it names exists;
//   - every manifest that was current less than the grace ago still has
//     all its objects (a reader holding it can finish);
//
// and at the end every offset of the current manifest reads back from the
// bucket through a fresh tier.
func TestTwoWritersNeverLoseAPublishedSegment(t *testing.T) {
	checkTwoWriters(t, format.Paging{})
}

// TestTwoWritersWithPages is the same with small manifest pages, so that
// both writers write pages (and index pages) all along: a deposed
// leader's pages and roots never become part of the manifest.
func TestTwoWritersWithPages(t *testing.T) {
	checkTwoWriters(t, smallPages)
}

func checkTwoWriters(t *testing.T, pg format.Paging) {
	const (
		rounds   = 600
		takeover = 100
		grace    = time.Hour
	)
	ctx := context.Background()
	clk := newClock()
	plain := newHookStore(newDirStore(t), clk)
	faulty := objstore.WithFaults(plain, objstore.FaultConfig{FailRate: 0.03, LostReplyRate: 0.03, Seed: 9})
	segs := testSegments(t, 250)
	rng := rand.New(rand.NewPCG(9, 9))

	type writer struct {
		name  string
		tier  *Tier
		epoch int32
	}
	old := &writer{"epoch-3 leader", openTierWith(t, faulty, clk.Now, pg), 3}
	cur := &writer{"epoch-5 leader", openTierWith(t, faulty, clk.Now, pg), 5}
	leader := old
	var (
		pubStart, pubEnd int64 // what the leader in office was told
		ops              = map[string]int{}
	)
	type seen struct {
		m  *format.Root
		at time.Time
	}
	var history []seen

	for round := range rounds {
		if round == takeover {
			// The new leader starts from the bucket; the old one is not told.
			if _, err := cur.tier.Manifest(ctx, testTP); err != nil {
				// A failed load is retried by the next step.
				t.Logf("round %d: takeover load: %v", round, err)
			}
			leader = cur
		}
		w := old
		if round >= takeover && rng.IntN(2) == 0 {
			w = cur
		}
		inOffice := w == leader
		switch op := rng.IntN(20); {
		case op < 10:
			m, err := w.tier.Manifest(ctx, testTP)
			if err != nil {
				ops["load failed"]++
				break
			}
			i := 0
			for i < len(segs) && segs[i].EndOffset <= m.EndOffset() && !m.Empty() {
				i++
			}
			if i == len(segs) {
				break
			}
			m, err = w.tier.Upload(ctx, testTP, segs[i], w.epoch)
			switch {
			case errors.Is(err, ErrFenced):
				ops["upload fenced"]++
				if inOffice {
					t.Fatalf("round %d: the leader in office was fenced: %v", round, err)
				}
			case err != nil:
				ops["upload failed"]++
			default:
				ops["upload"]++
				if !inOffice {
					ops["upload by the deposed leader"]++
				} else {
					pubEnd = max(pubEnd, m.EndOffset())
				}
			}
		case op < 13:
			m, err := w.tier.Manifest(ctx, testTP)
			if err != nil || m.Empty() {
				break
			}
			keep := int64(rng.IntN(20)+3) * segs[0].Size
			start, err := w.tier.ApplyRetention(ctx, testTP, Retention{Bytes: keep, Age: -1, LeaderEpoch: w.epoch})
			switch {
			case errors.Is(err, ErrFenced):
				ops["retention fenced"]++
				if inOffice {
					t.Fatalf("round %d: the leader in office was fenced: %v", round, err)
				}
			case err != nil:
				ops["retention failed"]++
				if !inOffice {
					break
				}
				// A failed publication may have been applied (a lost reply
				// that could not be read back): the bucket may then show
				// this retention. Accept it only if it kept what was asked.
				m, ok, rerr := ReadManifest(ctx, plain, testTP)
				if rerr != nil || !ok || m.LogStartOffset <= pubStart {
					break
				}
				if kept := m.Totals().Bytes; kept < keep {
					t.Fatalf("round %d: a failed retention to keep %d bytes left %s with %d", round, keep, m.Key(), kept)
				}
				ops["retention applied despite an error"]++
				pubStart = m.LogStartOffset
			default:
				ops["retention"]++
				if !inOffice {
					ops["retention by the deposed leader"]++
				} else {
					pubStart = max(pubStart, start)
				}
			}
		default:
			if _, err := w.tier.CollectOrphans(ctx, testTP, grace); err != nil {
				ops["collect failed"]++
			} else {
				ops["collect"]++
			}
		}
		clk.add(time.Duration(rng.IntN(20)) * time.Minute)

		m, ok, err := ReadManifest(ctx, plain, testTP)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !ok {
			continue
		}
		if pubEnd > pubStart && (m.LogStartOffset > pubStart || m.EndOffset() < pubEnd) {
			t.Fatalf("round %d: the bucket's manifest %s holds [%d, %d); the leader in office published [%d, %d)",
				round, m.Key(), m.LogStartOffset, m.EndOffset(), pubStart, pubEnd)
		}
		history = append(history, seen{m, clk.Now()})
		for _, h := range history {
			if clk.Now().Sub(h.at) >= grace {
				continue
			}
			for _, s := range allSegments(t, plain, h.m) {
				if _, err := plain.Stat(ctx, s.Key); err != nil {
					t.Fatalf("round %d: manifest %s, current %v ago (grace %v), names a missing object: %v",
						round, h.m.Key(), clk.Now().Sub(h.at), grace, err)
				}
			}
		}
	}
	t.Logf("%v; published [%d, %d)", ops, pubStart, pubEnd)
	if ops["upload"] < 20 || ops["retention"] < 5 || ops["collect"] < 20 || ops["upload fenced"]+ops["retention fenced"] == 0 {
		t.Fatalf("the test exercised too little: %v", ops)
	}

	checkEveryManifestComplete(t, plain)
	m := checkCovers(t, plain, pubStart, pubEnd)
	reader := openTier(t, plain, clk.Now)
	for _, s := range allSegments(t, plain, m) {
		from := max(s.BaseOffset, m.LogStartOffset)
		if got, err := reader.Read(ctx, testTP, nil, from, 1<<20); err != nil || len(got) == 0 {
			t.Fatalf("read offset %d of %s: %d bytes, %v", from, s.Key, len(got), err)
		}
	}
}
