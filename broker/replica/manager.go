package replica

import (
	"context"
	"log/slog"
	"sync"
)

// Manager runs one Fetcher per leader this broker follows partitions of,
// and stops a fetcher once it has nothing left to fetch.
type Manager struct {
	ctx    context.Context
	self   int32
	log    *slog.Logger
	client func(leader int32) Client
	epoch  func() int64

	mu       sync.Mutex
	fetchers map[int32]*running
	// where maps each followed partition to the leader it is fetched from.
	where map[Key]int32
	wg    sync.WaitGroup
}

type running struct {
	f      *Fetcher
	cancel context.CancelFunc
}

// NewManager returns a manager whose fetchers run until ctx is done.
// client returns the client for a leader's broker id; brokerEpoch is this
// broker's registration epoch.
func NewManager(ctx context.Context, self int32, client func(leader int32) Client, brokerEpoch func() int64, log *slog.Logger) *Manager {
	return &Manager{ctx: ctx, self: self, log: log, client: client, epoch: brokerEpoch, fetchers: map[int32]*running{}, where: map[Key]int32{}}
}

// Follow makes p fetched from leader, moving it from any other leader's
// fetcher first.
func (m *Manager) Follow(leader int32, p Partition) {
	k := Key{p.Topic, p.Index}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.where[k]; ok && old != leader {
		m.removeLocked(k, old)
	}
	r, ok := m.fetchers[leader]
	if !ok {
		ctx, cancel := context.WithCancel(m.ctx)
		r = &running{f: NewFetcher(FetcherConfig{Self: m.self, Leader: leader, Client: m.client(leader), Logger: m.log, BrokerEpoch: m.epoch}), cancel: cancel}
		m.fetchers[leader] = r
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			r.f.Run(ctx)
		}()
	}
	r.f.Set(p)
	m.where[k] = leader
}

// Unfollow stops fetching k. When it returns no fetcher writes to k's log.
func (m *Manager) Unfollow(k Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.where[k]; ok {
		m.removeLocked(k, old)
	}
}

func (m *Manager) removeLocked(k Key, leader int32) {
	delete(m.where, k)
	r := m.fetchers[leader]
	if r == nil {
		return
	}
	r.f.Remove(k)
	if r.f.Len() == 0 {
		r.cancel()
		delete(m.fetchers, leader)
	}
}

// Following reports the leader k is fetched from.
func (m *Manager) Following(k Key) (int32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.where[k]
	return l, ok
}

// Close stops every fetcher and waits for them.
func (m *Manager) Close() {
	m.mu.Lock()
	for id, r := range m.fetchers {
		r.cancel()
		delete(m.fetchers, id)
	}
	m.where = map[Key]int32{}
	m.mu.Unlock()
	m.wg.Wait()
}
