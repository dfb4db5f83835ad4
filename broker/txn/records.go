package txn

import (
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The records of __transaction_state are Kafka's TransactionLogKey (version
// 0: the transactional id) and TransactionLogValue, encoded with kmsg's
// TxnMetadataKey and TxnMetadataValue, so a Kafka tool reads ours and we
// read a Kafka cluster's. We write value version 1 (flexible, Kafka 4.0):
// the KIP-890 fields (previous and next producer id, client transaction
// version) exist only as its tagged fields.
const (
	keyVersion   = 0
	valueVersion = 1
)

// Record is one key and value of __transaction_state; a nil Value is a
// tombstone.
type Record struct {
	Key, Value []byte
}

// ErrUnknownKey is wrapped by DecodeKey for a key version this coordinator
// does not know: a loader skips such records (a newer Kafka may add record
// kinds) instead of failing.
var ErrUnknownKey = errors.New("txn: unknown __transaction_state key version")

var errCorruptRecord = errors.New("txn: malformed __transaction_state record")

// EncodeKey returns the record key of transactional id.
func EncodeKey(id string) []byte {
	k := kmsg.TxnMetadataKey{Version: keyVersion, TransactionalID: id}
	return k.AppendTo(nil)
}

// DecodeKey returns the transactional id of a record key.
func DecodeKey(b []byte) (string, error) {
	var k kmsg.TxnMetadataKey
	if err := k.ReadFrom(b); err != nil {
		return "", fmt.Errorf("%w: key: %v", errCorruptRecord, err)
	}
	if k.Version != keyVersion {
		return "", fmt.Errorf("%w: %d", ErrUnknownKey, k.Version)
	}
	// The codec neither refuses a null string nor trailing bytes; a key is
	// compared byte for byte by compaction, so only the canonical form is
	// one.
	if len(b) != 4+len(k.TransactionalID) {
		return "", fmt.Errorf("%w: key of %d bytes holds an id of %d", errCorruptRecord, len(b), len(k.TransactionalID))
	}
	return k.TransactionalID, nil
}

// EncodeValue returns the record value of m in value version 1.
func EncodeValue(m Metadata) []byte { return encodeValue(m, valueVersion) }

func encodeValue(m Metadata, version int16) []byte {
	v := kmsg.NewTxnMetadataValue()
	v.Version = version
	v.ProducerID = m.ProducerID
	v.ProducerEpoch = m.ProducerEpoch
	v.TimeoutMillis = m.TimeoutMs
	v.State = kmsg.TransactionState(m.State)
	v.LastUpdateTimestamp = m.LastUpdate
	v.StartTimestamp = m.StartTime
	if version >= 1 {
		v.PreviousProducerID = m.LastProducerID
		v.NextProducerID = m.NextProducerID
		v.ClientTransactionVersion = m.ClientTxnVersion
	}
	// Kafka writes an Empty transaction's partitions as null and any other
	// state's as a (possibly empty) array.
	if m.State != Empty {
		v.Topics = []kmsg.TxnMetadataValueTopic{}
		for _, p := range m.Partitions {
			if n := len(v.Topics); n == 0 || v.Topics[n-1].Topic != p.Topic {
				v.Topics = append(v.Topics, kmsg.TxnMetadataValueTopic{Topic: p.Topic})
			}
			t := &v.Topics[len(v.Topics)-1]
			t.Partitions = append(t.Partitions, p.Partition)
		}
	}
	return v.AppendTo(nil)
}

// DecodeValue returns the metadata of transactional id id from a record
// value of version 0 or 1. The last producer epoch is not in the record:
// it comes back as -1, as Kafka loads it.
func DecodeValue(id string, b []byte) (Metadata, error) {
	if len(b) < 2 {
		return Metadata{}, fmt.Errorf("%w: value of %d bytes", errCorruptRecord, len(b))
	}
	if ver := int16(b[0])<<8 | int16(b[1]); ver < 0 || ver > valueVersion {
		return Metadata{}, fmt.Errorf("%w: value version %d", errCorruptRecord, ver)
	}
	v := kmsg.NewTxnMetadataValue()
	if err := v.ReadFrom(b); err != nil {
		return Metadata{}, fmt.Errorf("%w: value: %v", errCorruptRecord, err)
	}
	m := Metadata{
		TransactionalID:   id,
		ProducerID:        v.ProducerID,
		LastProducerID:    v.PreviousProducerID,
		NextProducerID:    v.NextProducerID,
		ProducerEpoch:     v.ProducerEpoch,
		LastProducerEpoch: NoProducerEpoch,
		TimeoutMs:         v.TimeoutMillis,
		State:             State(v.State),
		StartTime:         v.StartTimestamp,
		LastUpdate:        v.LastUpdateTimestamp,
		ClientTxnVersion:  v.ClientTransactionVersion,
	}
	if !m.State.valid() {
		return Metadata{}, fmt.Errorf("%w: %q: state %d", errCorruptRecord, id, v.State)
	}
	if m.State == Empty && v.Topics != nil {
		return Metadata{}, fmt.Errorf("%w: %q: Empty with partitions", errCorruptRecord, id)
	}
	for _, t := range v.Topics {
		for _, p := range t.Partitions {
			m.Partitions = append(m.Partitions, TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	slices.SortFunc(m.Partitions, TopicPartition.compare)
	m.Partitions = slices.Compact(m.Partitions)
	return m, nil
}

// Tombstone is the record that deletes transactional id id: written when
// the id expires, it lets compaction drop the id's history.
func Tombstone(id string) Record { return Record{Key: EncodeKey(id)} }
