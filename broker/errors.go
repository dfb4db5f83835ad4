package broker

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/partition"
	"strata/meta"
	"strata/segment"
)

// errorCode maps an error from the layers below to the Kafka error code a
// client understands. This is the only place where that mapping happens.
func errorCode(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	for _, m := range errorMap {
		if errors.Is(err, m.err) {
			return m.code.Code
		}
	}
	return kerr.UnknownServerError.Code
}

var errorMap = []struct {
	err  error
	code *kerr.Error
}{
	{segment.ErrCorruptMessage, kerr.CorruptMessage},
	{segment.ErrInvalidRecord, kerr.InvalidRecord},
	{segment.ErrUnsupportedMagic, kerr.UnsupportedForMessageFormat},
	{segment.ErrMessageTooLarge, kerr.MessageTooLarge},
	{segment.ErrInvalidTimestamp, kerr.InvalidTimestamp},
	{segment.ErrOutOfOrderSequence, kerr.OutOfOrderSequenceNumber},
	{segment.ErrInvalidProducerEpoch, kerr.InvalidProducerEpoch},
	{segment.ErrInvalidTxnState, kerr.InvalidTxnState},
	{segment.ErrTransactionCoordinatorFenced, kerr.TransactionCoordinatorFenced},
	{segment.ErrOffsetOutOfRange, kerr.OffsetOutOfRange},
	{segment.ErrCorruptSegment, kerr.KafkaStorageError},
	{segment.ErrClosed, kerr.NotLeaderForPartition},
	{meta.ErrTopicExists, kerr.TopicAlreadyExists},
	{meta.ErrUnknownTopic, kerr.UnknownTopicOrPartition},
	{meta.ErrInvalidPartitions, kerr.InvalidPartitions},
	{meta.ErrInvalidReplicationFactor, kerr.InvalidReplicationFactor},
	{meta.ErrNotController, kerr.NotController},
	{meta.ErrDuplicateBroker, kerr.DuplicateBrokerRegistration},
	{meta.ErrStaleBrokerEpoch, kerr.StaleBrokerEpoch},
	{meta.ErrFencedLeaderEpoch, kerr.FencedLeaderEpoch},
	{meta.ErrInvalidUpdateVersion, kerr.InvalidUpdateVersion},
	{meta.ErrIneligibleReplica, kerr.IneligibleReplica},
	{meta.ErrUnknownTopicOrPartition, kerr.UnknownTopicOrPartition},
	{meta.ErrElectionNotNeeded, kerr.ElectionNotNeeded},
	{meta.ErrPreferredLeaderNotAvailable, kerr.PreferredLeaderNotAvailable},
	{meta.ErrScramCredentialNotFound, kerr.ResourceNotFound},
	{meta.ErrDuplicateScramCredential, kerr.DuplicateResource},
	{meta.ErrUnsupportedScramMechanism, kerr.UnsupportedSaslMechanism},
	{meta.ErrUnacceptableScramCredential, kerr.UnacceptableCredential},
	{partition.ErrNotLeader, kerr.NotLeaderForPartition},
	{partition.ErrClosed, kerr.NotLeaderForPartition},
}

// answerError is what a response carries for err, its code and message,
// and counts the code against api.
func (b *Broker) answerError(api kmsg.Key, err error) (int16, *string) {
	code := errorCode(err)
	b.metrics.countError(api, code)
	return code, errMessage(err)
}

// errMessage is the text to put in a response's ErrorMessage field: the
// error's own words, which name what was wrong.
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}
