package group

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
)

// groupValueLocked encodes the group as Kafka's GroupMetadataValue.
func (g *group) groupValueLocked() []byte {
	v := kmsg.NewGroupMetadataValue()
	v.Version = groupValueVersion
	v.ProtocolType = g.protocolType
	v.Generation = g.generation
	if g.protocol != "" {
		v.Protocol = kmsg.StringPtr(g.protocol)
	}
	if g.leader != "" {
		v.Leader = kmsg.StringPtr(g.leader)
	}
	v.CurrentStateTimestamp = g.stateSince.UnixMilli()
	for _, m := range g.sortedMembersLocked() {
		vm := kmsg.NewGroupMetadataValueMember()
		vm.MemberID = m.id
		if m.instanceID != "" {
			vm.InstanceID = kmsg.StringPtr(m.instanceID)
		}
		vm.ClientID = m.clientID
		vm.ClientHost = m.clientHost
		vm.RebalanceTimeoutMillis = int32(m.rebalanceTimeout.Milliseconds())
		vm.SessionTimeoutMillis = int32(m.sessionTimeout.Milliseconds())
		vm.Subscription = m.metadataFor(g.protocol)
		vm.Assignment = m.assignment
		v.Members = append(v.Members, vm)
	}
	return v.AppendTo(nil)
}

// storeLocked writes the group's metadata and waits for the commit.
func (g *group) storeLocked(ctx context.Context) error {
	_, err := g.appendLocked(ctx, []record{{key: groupKey(g.id), value: g.groupValueLocked()}}, noProducer)
	return err
}

// replayed is what a partition's records say about one group.
type replayed struct {
	meta    *kmsg.GroupMetadataValue
	offsets offsetTable
	txns    txnOffsets
}

// replayState is what a partition's records say about its groups.
type replayState struct {
	groups map[string]*replayed
	// open are the groups with offsets pending in each producer's
	// transaction.
	open map[int64]map[string]struct{}
}

func (s *replayState) get(id string) *replayed {
	r := s.groups[id]
	if r == nil {
		r = &replayed{offsets: make(offsetTable), txns: make(txnOffsets)}
		s.groups[id] = r
	}
	return r
}

// endTxn applies a transaction marker of producer pid.
func (s *replayState) endTxn(pid int64, commit bool) {
	for id := range s.open[pid] {
		s.groups[id].txns.complete(pid, commit, s.groups[id].offsets)
	}
	delete(s.open, pid)
}

// replay reads partition from its start and rebuilds its groups. Later
// records win; tombstones delete. Records of a transactional batch are
// pending for its producer until a marker of that producer commits or
// aborts them; a transaction still open at the end stays pending for
// CompleteTxn.
func (c *Coordinator) replay(ctx context.Context, partition int32) ([]*group, error) {
	state := &replayState{groups: make(map[string]*replayed), open: make(map[int64]map[string]struct{})}
	var buf []byte
	var next int64
	records := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var err error
		buf, err = c.cfg.Log.Read(buf[:0], partition, next)
		if err != nil {
			return nil, fmt.Errorf("read at %d: %w", next, err)
		}
		if len(buf) == 0 {
			break
		}
		n, err := eachBatch(buf, func(h batchInfo, raw []byte) error {
			switch {
			case h.compressed():
				c.log.Warn("skipping batch the coordinator did not write", "partition", partition, "offset", h.baseOffset)
				return nil
			case h.control():
				// Compaction may have emptied the marker: then its
				// transaction's records are gone too.
				return eachRecord(h, raw, func(r record) error {
					m, err := segment.DecodeTxnMarker(r.key, r.value)
					if err != nil {
						c.log.Warn("skipping control record", "partition", partition, "offset", h.baseOffset, "err", err)
						return nil
					}
					state.endTxn(h.producerID, m.Commit)
					return nil
				})
			}
			return eachRecord(h, raw, func(r record) error {
				records++
				return state.apply(r, h)
			})
		})
		if err != nil {
			return nil, fmt.Errorf("at offset %d: %w", next, err)
		}
		if n <= next {
			return nil, fmt.Errorf("%w: no progress at offset %d", errCorruptBatch, next)
		}
		next = n
	}

	now := c.clock.Now()
	var groups []*group
	for id, r := range state.groups {
		if r.meta == nil && len(r.offsets) == 0 && len(r.txns) == 0 {
			continue
		}
		if Partition(id, c.cfg.Partitions) != partition {
			c.log.Warn("group found in the wrong offsets partition; was the partition count changed?", "group", id, "partition", partition)
			continue
		}
		g := c.newGroup(id, partition)
		g.offsets, g.txns = r.offsets, r.txns
		g.stateSince = now
		if v := r.meta; v != nil {
			g.protocolType = v.ProtocolType
			g.generation = v.Generation
			if v.Protocol != nil {
				g.protocol = *v.Protocol
			}
			if v.Leader != nil {
				g.leader = *v.Leader
			}
			if v.CurrentStateTimestamp > 0 {
				g.stateSince = time.UnixMilli(v.CurrentStateTimestamp)
			}
			for _, vm := range v.Members {
				m := &member{
					id: vm.MemberID, clientID: vm.ClientID, clientHost: vm.ClientHost,
					protocols:        []protocol{{name: g.protocol, metadata: vm.Subscription}},
					sessionTimeout:   time.Duration(vm.SessionTimeoutMillis) * time.Millisecond,
					rebalanceTimeout: time.Duration(vm.RebalanceTimeoutMillis) * time.Millisecond,
					assignment:       vm.Assignment,
				}
				if m.rebalanceTimeout <= 0 {
					m.rebalanceTimeout = m.sessionTimeout
				}
				if vm.InstanceID != nil {
					m.instanceID = *vm.InstanceID
					g.statics[m.instanceID] = m.id
				}
				g.members[m.id] = m
			}
			if len(g.members) > 0 {
				// Members carry on with their generation: a coordinator
				// restart costs them no rebalance if they heartbeat
				// within their session timeout.
				g.state = StateStable
			}
		}
		groups = append(groups, g)
	}
	c.log.Debug("replayed offsets partition", "partition", partition, "records", records, "end", next)
	return groups, nil
}

// apply applies record r of the batch h.
func (s *replayState) apply(r record, h batchInfo) error {
	if len(r.key) < 2 {
		return fmt.Errorf("%w: key of %d bytes", errCorruptBatch, len(r.key))
	}
	switch version := int16(r.key[0])<<8 | int16(r.key[1]); version {
	case 0, 1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(r.key); err != nil {
			return fmt.Errorf("offset commit key: %w", err)
		}
		g := s.get(k.Group)
		if r.value == nil {
			if h.transactional() {
				return nil // the coordinator writes none: nothing to undo
			}
			g.offsets.remove(k.Topic, k.Partition)
			g.txns.remove(k.Topic, k.Partition)
			return nil
		}
		var v kmsg.OffsetCommitValue
		if err := v.ReadFrom(r.value); err != nil {
			return fmt.Errorf("offset commit value: %w", err)
		}
		epoch := v.LeaderEpoch
		if v.Version < 3 {
			epoch = -1
		}
		o := offset{offset: v.Offset, leaderEpoch: epoch, metadata: v.Metadata, commitTime: v.CommitTimestamp, logOffset: h.baseOffset}
		if !h.transactional() {
			g.offsets.set(k.Topic, k.Partition, o)
			return nil
		}
		g.txns.add(h.producerID, k.Topic, k.Partition, o)
		open := s.open[h.producerID]
		if open == nil {
			open = make(map[string]struct{})
			s.open[h.producerID] = open
		}
		open[k.Group] = struct{}{}
	case 2:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(r.key); err != nil {
			return fmt.Errorf("group metadata key: %w", err)
		}
		if r.value == nil {
			if g := s.groups[k.Group]; g != nil {
				g.meta = nil
			}
			return nil
		}
		var v kmsg.GroupMetadataValue
		if err := v.ReadFrom(r.value); err != nil {
			return fmt.Errorf("group metadata value: %w", err)
		}
		s.get(k.Group).meta = &v
	default:
		// Newer coordinators (KIP-848) write other record types; they
		// describe groups this coordinator does not serve.
		return nil
	}
	return nil
}
