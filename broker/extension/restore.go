package extension

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RestoreRequest (StrataRestore v0) asks the controller to restore topics
// from the bucket's newest metadata checkpoint (of History, when set), or
// with DryRun only to say what it would do. It goes to the controller (kgo sends it there, as an
// admin request); another broker answers NOT_CONTROLLER.
type RestoreRequest struct {
	Version int16 `json:"-"`
	// Topics are the topics to restore; none means every topic of the
	// checkpoint.
	Topics []string `json:"topics,omitempty"`
	DryRun bool     `json:"dry_run,omitempty"`
	// History names the metadata history to restore from: 32 hex
	// digits, or a prefix of at least 8 that names one history. Empty
	// means the newest history naming a topic of users' own, this
	// cluster's set aside.
	History string `json:"history,omitempty"`
	// TimeoutMillis bounds the restore on the broker; kgo also waits that
	// long (plus its overhead) for the answer.
	TimeoutMillis int32 `json:"timeout_ms"`
}

var (
	_ kmsg.AdminRequest   = (*RestoreRequest)(nil)
	_ kmsg.TimeoutRequest = (*RestoreRequest)(nil)
	_ kmsg.Response       = (*RestoreResponse)(nil)
)

func (*RestoreRequest) Key() int16                   { return RestoreKey }
func (*RestoreRequest) MaxVersion() int16            { return 0 }
func (r *RestoreRequest) SetVersion(v int16)         { r.Version = v }
func (r *RestoreRequest) GetVersion() int16          { return r.Version }
func (*RestoreRequest) IsFlexible() bool             { return false }
func (*RestoreRequest) IsAdminRequest()              {}
func (r *RestoreRequest) Timeout() int32             { return r.TimeoutMillis }
func (r *RestoreRequest) SetTimeout(ms int32)        { r.TimeoutMillis = ms }
func (r *RestoreRequest) AppendTo(dst []byte) []byte { return appendBody(dst, r) }
func (r *RestoreRequest) ReadFrom(src []byte) error {
	v := RestoreRequest{Version: r.Version}
	if err := readBody(src, &v); err != nil {
		return err
	}
	*r = v
	return nil
}

func (r *RestoreRequest) ResponseKind() kmsg.Response {
	return &RestoreResponse{Version: r.Version}
}

// RestoreResponse answers a RestoreRequest. ErrorCode is a Kafka error
// code: NOT_CONTROLLER (retry on the controller), INVALID_REQUEST (a
// restore refused or impossible, ErrorMessage says why), REQUEST_TIMED_OUT,
// or another the broker met. Plan is what was (or, for a dry run, would
// be) done, present whenever a checkpoint was read.
type RestoreResponse struct {
	Version      int16        `json:"-"`
	ErrorCode    int16        `json:"error_code"`
	ErrorMessage string       `json:"error_message,omitempty"`
	Plan         *RestorePlan `json:"plan,omitempty"`
}

func (*RestoreResponse) Key() int16                   { return RestoreKey }
func (*RestoreResponse) MaxVersion() int16            { return 0 }
func (r *RestoreResponse) SetVersion(v int16)         { r.Version = v }
func (r *RestoreResponse) GetVersion() int16          { return r.Version }
func (*RestoreResponse) IsFlexible() bool             { return false }
func (r *RestoreResponse) AppendTo(dst []byte) []byte { return appendBody(dst, r) }
func (r *RestoreResponse) ReadFrom(src []byte) error {
	v := RestoreResponse{Version: r.Version}
	if err := readBody(src, &v); err != nil {
		return err
	}
	*r = v
	return nil
}

func (r *RestoreResponse) RequestKind() kmsg.Request {
	return &RestoreRequest{Version: r.Version}
}

// RestorePlan is the broker's plan (broker/node's RestorePlan) on the
// wire.
type RestorePlan struct {
	// History is the metadata history restored from (32 hex digits;
	// absent from a broker older than it), and Checkpoint the key of its
	// checkpoint restored from; ClusterID, Index and WrittenMs are that
	// checkpoint's.
	History    string         `json:"history,omitempty"`
	Checkpoint string         `json:"checkpoint"`
	ClusterID  string         `json:"cluster_id"`
	Index      uint64         `json:"index"`
	WrittenMs  int64          `json:"written_ms"`
	Topics     []RestoreTopic `json:"topics"`
	// OtherHistories are the bucket's other metadata histories, the
	// restoring cluster's own set aside, the most recently written first.
	OtherHistories []RestoreHistory `json:"other_histories,omitempty"`
}

// RestoreHistory is a metadata history a plan did not restore from.
type RestoreHistory struct {
	History    string `json:"history"`
	Checkpoint string `json:"checkpoint"`
	WrittenMs  int64  `json:"written_ms"`
	// Topics are the names of the topics of users' own its newest
	// checkpoint names that the plan's does not (and the cluster does not
	// have): they are restored only with a restore from this history.
	Topics []string `json:"topics,omitempty"`
	// Error says why its checkpoint could not be read.
	Error string `json:"error,omitempty"`
}

// RestoreTopic is one topic of a plan.
type RestoreTopic struct {
	Name string `json:"name"`
	// ID is the topic id as 32 hex digits, as in bucket keys.
	ID       string `json:"id"`
	Internal bool   `json:"internal,omitempty"`
	// Action is "create", "replace", "present" or "refused".
	Action            string             `json:"action"`
	Reason            string             `json:"reason,omitempty"`
	ReplicationFactor int16              `json:"replication_factor"`
	Configs           map[string]string  `json:"configs,omitempty"`
	Partitions        []RestorePartition `json:"partitions"`
}

// RestorePartition is one partition of a planned topic.
type RestorePartition struct {
	Partition   int32  `json:"partition"`
	LeaderEpoch int32  `json:"leader_epoch"`
	Manifest    string `json:"manifest,omitempty"`
	// LogStart and End bound the offsets the bucket holds, [LogStart, End).
	LogStart int64 `json:"log_start"`
	End      int64 `json:"end"`
	Bytes    int64 `json:"bytes"`
}
