package loadtest_test

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/loadtest"
	"strata/loadtest/loadtesttest"
)

func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestAcceptanceKfake runs the suite that broker tests run against Strata,
// against kfake as it starts by default (no auto-creation) and as
// `loadtest kfake` runs it (auto-creation on).
func TestAcceptanceKfake(t *testing.T) {
	t.Run("NoAutoCreate", func(t *testing.T) {
		loadtesttest.Run(t, newCluster(t).ListenAddrs()[0], false)
	})
	t.Run("AutoCreate", func(t *testing.T) {
		loadtesttest.Run(t, newCluster(t, kfake.AllowAutoTopicCreation()).ListenAddrs()[0], true)
	})
}

// A verifying consumer must notice each way a broker can betray a producer:
// losing an acknowledged record, storing it twice, altering its bytes, or
// reordering it within a partition. kfake is made to misbehave by rewriting
// the first multi-record batch of a produce request before it stores it.
func TestVerifyDetectsFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func([]kmsg.Record) []kmsg.Record
		want  loadtest.VerifyReport
		msg   string
	}{{
		name:  "dropped",
		fault: func(rs []kmsg.Record) []kmsg.Record { return append(rs[:1:1], rs[2:]...) },
		want:  loadtest.VerifyReport{Missing: 1},
		msg:   "1 missing",
	}, {
		name: "duplicated",
		fault: func(rs []kmsg.Record) []kmsg.Record {
			return append(rs[:2:2], rs[1:]...)
		},
		want: loadtest.VerifyReport{Duplicated: 1},
		msg:  "1 duplicated",
	}, {
		name: "corrupted",
		fault: func(rs []kmsg.Record) []kmsg.Record {
			v := append([]byte(nil), rs[1].Value...)
			v[len(v)/2] ^= 0x01
			rs[1].Value = v
			return rs
		},
		want: loadtest.VerifyReport{Corrupt: 1},
		msg:  "1 corrupt",
	}, {
		name: "reordered",
		fault: func(rs []kmsg.Record) []kmsg.Record {
			rs[1], rs[2] = rs[2], rs[1]
			return rs
		},
		want: loadtest.VerifyReport{OutOfOrder: 1},
		msg:  "1 out of order",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			bootstrap := c.ListenAddrs()[0]
			var faulted atomic.Bool
			c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				if !faulted.Load() && rewriteFirstBatch(t, req.(*kmsg.ProduceRequest), tc.fault) {
					faulted.Store(true)
				}
				return nil, nil, false // kfake stores the rewritten request
			})

			topic := loadtesttest.Topic(t)
			p, err := loadtest.Produce(t.Context(), loadtest.ProduceConfig{
				Bootstrap: []string{bootstrap},
				Topic:     topic,
				Records:   300,
				Size:      32,
				// Not idempotent: kfake would reject the sequence
				// numbers of a batch whose record count changed.
				Idempotent: false,
				Linger:     20 * time.Millisecond,
				Create:     true,
				Partitions: 2,
				Verify:     true,
				Seed:       3,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Err(); err != nil || p.Records != 300 {
				t.Fatalf("produce: %d records, err %v", p.Records, err)
			}
			if !faulted.Load() {
				t.Fatal("no batch with three records was produced to fault")
			}

			got, err := loadtest.Consume(t.Context(), loadtest.ConsumeConfig{
				Bootstrap: []string{bootstrap},
				Topic:     topic,
				Duration:  20 * time.Second,
				Verify:    true,
				Seed:      3,
			})
			if err != nil {
				t.Fatal(err)
			}
			v := got.Verify
			if v.Missing != tc.want.Missing || v.Duplicated != tc.want.Duplicated ||
				v.Corrupt != tc.want.Corrupt || v.OutOfOrder != tc.want.OutOfOrder || v.Unterminated != 0 {
				t.Fatalf("verify report %+v, want %+v", *v, tc.want)
			}
			if err := got.Err(); err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Result.Err() = %v, want it to say %q", err, tc.msg)
			}

			// The command fails with the same one-line message.
			out, err := loadtesttest.RunCommand(t, "consume", "--bootstrap", bootstrap, "--topic", topic,
				"--duration", "20s", "--verify", "--seed", "3")
			if err == nil || !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("consume command: err %v, want one line saying %q\n%s", err, tc.msg, out)
			}
		})
	}
}

// rewriteFirstBatch applies fault to the records of the first uncompressed
// batch in req holding at least three records, re-encoding the batch so that
// it stays valid, and reports whether it found one.
func rewriteFirstBatch(t *testing.T, req *kmsg.ProduceRequest, fault func([]kmsg.Record) []kmsg.Record) bool {
	for ti := range req.Topics {
		for pi := range req.Topics[ti].Partitions {
			p := &req.Topics[ti].Partitions[pi]
			var b kmsg.RecordBatch
			if err := b.ReadFrom(p.Records); err != nil || b.NumRecords < 3 || b.Attributes&0x07 != 0 {
				continue
			}
			rs, err := decodeRecords(b.Records, int(b.NumRecords))
			if err != nil {
				t.Errorf("decode batch to fault: %v", err) // on kfake's goroutine: no Fatal
				return false
			}
			rs = fault(rs)
			p.Records = encodeBatch(b, rs)
			return true
		}
	}
	return false
}

func decodeRecords(src []byte, n int) ([]kmsg.Record, error) {
	rs := make([]kmsg.Record, 0, n)
	for range n {
		l, w := binary.Varint(src)
		if w <= 0 || l < 0 || int(l)+w > len(src) {
			return nil, errors.New("bad record length")
		}
		var r kmsg.Record
		if err := r.ReadFrom(src[:w+int(l)]); err != nil {
			return nil, err
		}
		rs = append(rs, r)
		src = src[w+int(l):]
	}
	return rs, nil
}

// encodeBatch rebuilds b around rs: offset deltas, lengths and CRC.
func encodeBatch(b kmsg.RecordBatch, rs []kmsg.Record) []byte {
	var recs []byte
	for i := range rs {
		r := &rs[i]
		r.OffsetDelta = int32(i)
		r.Length = 0
		r.Length = int32(len(r.AppendTo(nil)) - 1) // the zero length took one byte
		recs = r.AppendTo(recs)
	}
	b.Records = recs
	b.NumRecords = int32(len(rs))
	b.LastOffsetDelta = int32(len(rs) - 1)
	b.Length = 0
	b.Length = int32(len(b.AppendTo(nil)) - 12) // after FirstOffset and Length
	raw := b.AppendTo(nil)
	b.CRC = int32(crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b.AppendTo(nil)
}
