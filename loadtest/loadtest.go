// Package loadtest generates load against, and checks the answers of, any
// Kafka-protocol broker: Strata, Apache Kafka, Redpanda or franz-go's kfake.
//
// It owns the `strata loadtest` command (produce, consume, e2e), the record
// format that lets a consumer verify what a producer wrote (record.go), and
// the figures a run reports: throughput, HDR latency percentiles and, in
// verify mode, missing, duplicated, corrupt and out-of-order counts.
//
// The package drives brokers from outside through franz-go's kgo and kadm
// clients and imports nothing of the Strata server, so that the same tool,
// unchanged, measures Strata and its peers.
package loadtest

import (
	"fmt"
	"strings"
	"time"
)

// MiB is the unit of MBPerSec and of rates in MB/s: 2^20 bytes, as in
// kafka-producer-perf-test, so figures compare directly with it.
const MiB = 1 << 20

// Result holds the figures of one run. Records and Bytes count data records
// only (end markers are bookkeeping), and Bytes counts keys plus values.
type Result struct {
	Records  int64         `json:"records"`
	Bytes    int64         `json:"bytes"`
	Duration time.Duration `json:"duration_ns"`

	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`

	// Latency is the produce acknowledgement latency for Produce, and the
	// end-to-end latency (due send time to receipt, across processes only
	// meaningful on one host or synchronized clocks) for Consume and E2E.
	Latency Percentiles `json:"latency_ms"`

	// Errors counts records the producer failed to write; FirstError is
	// the first of their errors.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`

	// Transactions counts the transactions a transactional producer
	// committed; AbortedTransactions those it aborted on purpose
	// (ProduceConfig.TxnAbortEvery), which held AbortedRecords records.
	// A transaction that failed is counted in Errors, by its records.
	Transactions        int64 `json:"transactions,omitempty"`
	AbortedTransactions int64 `json:"aborted_transactions,omitempty"`
	AbortedRecords      int64 `json:"aborted_records,omitempty"`

	// Verify is set when the run verified what it consumed.
	Verify *VerifyReport `json:"verify,omitempty"`
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
}

// VerifyReport counts what a verifying consumer found wrong. The totals are
// the sums over Partitions.
type VerifyReport struct {
	// Missing counts records a producer sent (according to its end
	// marker, or below a higher sequence seen) that never arrived.
	Missing int64 `json:"missing"`
	// Duplicated counts extra arrivals of a record already seen.
	Duplicated int64 `json:"duplicated"`
	// Corrupt counts records whose header or value is not what the
	// producer derived from the seed.
	Corrupt int64 `json:"corrupt"`
	// OutOfOrder counts records that arrived after a later record of the
	// same producer stream in the same partition.
	OutOfOrder int64 `json:"out_of_order"`
	// Unterminated counts (producer stream, partition) pairs whose end
	// marker never arrived: the consumer stopped early, or the tail of
	// the partition was lost. Their missing counts only see gaps.
	Unterminated int64 `json:"unterminated"`
	// Foreign counts records without a loadtest header, which other
	// clients wrote to the same topic: skipped, and not a fault.
	Foreign int64 `json:"foreign,omitempty"`
	// Aborted counts records of transactions their producer aborted that
	// a read_uncommitted consumer read, as it may; AbortedRead those a
	// read_committed consumer was given, a fault (an "aborted read").
	// Either way they are counted in Records but not judged for order
	// or completeness.
	Aborted     int64 `json:"aborted,omitempty"`
	AbortedRead int64 `json:"aborted_read,omitempty"`

	Partitions []PartitionReport `json:"partitions"`
}

// PartitionReport is the verification of one partition.
type PartitionReport struct {
	Partition  int32 `json:"partition"`
	Records    int64 `json:"records"`
	Missing    int64 `json:"missing"`
	Duplicated int64 `json:"duplicated"`
	Corrupt    int64 `json:"corrupt"`
	OutOfOrder int64 `json:"out_of_order"`
	Aborted    int64 `json:"aborted,omitempty"`
}

// Err returns nil if verification found nothing wrong, and otherwise one
// line naming every non-zero count.
func (v *VerifyReport) Err() error {
	if v == nil {
		return nil
	}
	var parts []string
	add := func(n int64, what string) {
		if n != 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(v.Missing, "missing")
	add(v.Duplicated, "duplicated")
	add(v.Corrupt, "corrupt")
	add(v.OutOfOrder, "out of order")
	add(v.AbortedRead, "aborted reads")
	add(v.Unterminated, "streams without end marker")
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("verify failed: %s", strings.Join(parts, ", "))
}

// Err returns nil if the run wrote and read everything cleanly, and
// otherwise one line: failed produces first, then verification faults.
func (r *Result) Err() error {
	if r.Errors > 0 {
		return fmt.Errorf("%d records failed to produce, first error: %s", r.Errors, r.FirstError)
	}
	return r.Verify.Err()
}

// Progress is a live view of a running test, handed to OnProgress.
type Progress struct {
	Elapsed time.Duration
	Records int64
	Bytes   int64
	Errors  int64
	// The run's bounds, zero when unset: whichever is reached first ends it.
	TargetRecords  int64
	TargetDuration time.Duration
}
