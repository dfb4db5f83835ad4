package compactor

import (
	"fmt"
	"testing"
)

func TestKeyMapLatest(t *testing.T) {
	m := newKeyMap(1 << 20)
	for i := range 3000 {
		if err := m.add(fmt.Appendf(nil, "k%d", i%1000), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		off, ok := m.latest(fmt.Appendf(nil, "k%d", i))
		if !ok || off != int64(2000+i) {
			t.Fatalf("k%d: latest %d %v, want %d", i, off, ok, 2000+i)
		}
	}
	if _, ok := m.latest([]byte("absent")); ok {
		t.Fatal("a key never added is in the map")
	}
}

func TestKeyMapBudget(t *testing.T) {
	const budget = 1 << 20
	m := newKeyMap(budget)
	if got := int64(len(m.slots)) * slotBytes; got > budget {
		t.Fatalf("slots take %d bytes, budget %d", got, budget)
	}
	n := 0
	for ; ; n++ {
		if err := m.add(fmt.Appendf(nil, "key-%d", n), int64(n)); err != nil {
			break
		}
	}
	if n != m.limit || m.free() != 0 {
		t.Fatalf("took %d keys, limit %d, free %d", n, m.limit, m.free())
	}
	// A key already in a full map still moves on.
	if err := m.add([]byte("key-7"), 1<<40); err != nil {
		t.Fatalf("updating a key in a full map: %v", err)
	}
	if off, _ := m.latest([]byte("key-7")); off != 1<<40 {
		t.Fatalf("key-7 at %d", off)
	}
	m.reset()
	if m.free() != m.limit {
		t.Fatal("reset left keys")
	}
}

// TestKeyMapCollisionKeepsBoth: two keys that share a slot hash are
// never taken for one another: both are kept (reported as not mapped).
func TestKeyMapCollisionKeepsBoth(t *testing.T) {
	m := newKeyMap(1 << 20)
	m.hash = func(key []byte) (uint64, uint64) {
		// Every key shares h1; h2 tells them apart.
		return 42, uint64(len(key))<<8 | uint64(key[len(key)-1])
	}
	m.add([]byte("a"), 1)
	m.add([]byte("a"), 5)
	if off, ok := m.latest([]byte("a")); !ok || off != 5 {
		t.Fatalf("before the collision: %d %v", off, ok)
	}
	m.add([]byte("b"), 9) // collides with "a"
	for _, k := range []string{"a", "b"} {
		if _, ok := m.latest([]byte(k)); ok {
			t.Fatalf("%s: a collided slot still answers", k)
		}
	}
	if m.doubtful != 1 {
		t.Fatalf("doubtful %d", m.doubtful)
	}
	// A key that was never added but shares h1 is not confused either.
	if _, ok := m.latest([]byte("c")); ok {
		t.Fatal("an unmapped key with the same slot hash is mapped")
	}
}
