package node

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestAskBatchAnswersOnlyLaterArrivals: a request that arrives while a
// question is in flight is not answered by it (the answer could predate a
// write acknowledged just before the request), but by the next question,
// which every request arriving meanwhile shares.
func TestAskBatchAnswersOnlyLaterArrivals(t *testing.T) {
	var a askBatch
	var asked atomic.Uint64
	sent := make(chan uint64, 10)
	release := make(chan struct{}, 10)
	ask := func() (uint64, error) {
		n := asked.Add(1)
		sent <- n
		<-release
		return n, nil // the n-th question is answered n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type answer struct {
		who string
		v   uint64
		err error
	}
	answers := make(chan answer, 10)
	request := func(who string) {
		go func() {
			v, err := a.do(ctx, ask)
			answers <- answer{who, v, err}
		}()
	}
	waitSent := func(want uint64) {
		t.Helper()
		select {
		case n := <-sent:
			if n != want {
				t.Fatalf("question %d sent, want %d", n, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("question %d never sent", want)
		}
	}
	noneSent := func(when string) {
		t.Helper()
		select {
		case n := <-sent:
			t.Fatalf("question %d sent %s", n, when)
		case <-time.After(100 * time.Millisecond):
		}
	}
	want := func(who string, v uint64) {
		t.Helper()
		select {
		case got := <-answers:
			if got.err != nil || got.who != who || got.v != v {
				t.Fatalf("answer %+v, want %s answered by question %d", got, who, v)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s never answered", who)
		}
	}

	request("first")
	waitSent(1)
	// Arriving while question 1 is in flight: they wait for question 2,
	// which is sent only once question 1 is answered.
	for _, who := range []string{"second", "third", "fourth"} {
		request(who)
	}
	noneSent("while another was in flight")
	release <- struct{}{}
	want("first", 1)
	waitSent(2)
	noneSent("for requests that share question 2")
	request("fifth") // arrives while question 2 is in flight
	noneSent("while another was in flight")
	release <- struct{}{}
	got := map[string]uint64{}
	for range 3 {
		select {
		case ans := <-answers:
			if ans.err != nil {
				t.Fatal(ans.err)
			}
			got[ans.who] = ans.v
		case <-time.After(5 * time.Second):
			t.Fatalf("answers so far %v; want second, third and fourth answered", got)
		}
	}
	for _, who := range []string{"second", "third", "fourth"} {
		if got[who] != 2 {
			t.Errorf("%s, which arrived while question 1 was in flight, answered by question %d, want 2", who, got[who])
		}
	}
	waitSent(3)
	release <- struct{}{}
	want("fifth", 3)
	if n := a.sent.Load(); n != 3 {
		t.Errorf("%d questions counted, want 3", n)
	}

	// A request whose context ends while it waits gives up; the question
	// it joined is sent for the next request all the same.
	request("sixth")
	waitSent(4)
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := a.do(short, ask); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("request whose context ended while question 4 was in flight: %v, want its deadline", err)
	}
	release <- struct{}{}
	want("sixth", 4)
	request("seventh")
	waitSent(5)
	release <- struct{}{}
	want("seventh", 5)
}
