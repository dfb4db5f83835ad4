package format

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// Metadata checkpoints (docs/bucket-format.md §12) are the cluster's
// metadata as of one point of its raft log: what a restore needs, beside
// the partitions' own objects, to serve the bucket's history again after
// every broker and the metadata quorum are lost.
//
//	metadata/checkpoints/<history>/<index>-<written>.checkpoint
//
// <history> names the metadata history (raft log) the state belongs to,
// 32 lowercase hex digits its first controller picked: a cluster started
// afresh over the same bucket to restore it has another, so its
// checkpoints never mix with, or prune, those of the history it restores.
// <index> is the raft index of the metadata state the checkpoint holds and
// <written> the writer's clock in Unix milliseconds, both zero-padded to
// 20 digits, so a history's newest checkpoint is its lexically largest
// key. The states of one history are points of one linear log, so a
// higher index is always a later state, whoever wrote it: a deposed
// controller's late write cannot sort above a newer state, which is the
// fencing manifests get from epochs. Between histories only the written
// time orders them.
const (
	checkpointsPrefix = "metadata/checkpoints/"
	checkpointExt     = ".checkpoint"
	checkpointVersion = 1
	// MaxCheckpointBytes bounds what a reader takes of a checkpoint: a
	// partition costs about 150 bytes, so this is some 400,000 partitions.
	MaxCheckpointBytes = 64 << 20
)

// CheckpointsPrefix is the prefix to list to find the bucket's metadata
// checkpoints, oldest first.
func CheckpointsPrefix() string { return checkpointsPrefix }

// CheckpointKey names one checkpoint.
type CheckpointKey struct {
	// History is the metadata history's id (Checkpoint.History).
	History string
	// Index is the raft index of the metadata state.
	Index uint64
	// WrittenMs is when it was written, Unix milliseconds.
	WrittenMs int64
}

// String returns the object key.
func (k CheckpointKey) String() string {
	return fmt.Sprintf("%s%s/%0*d-%0*d%s", checkpointsPrefix, k.History, offsetDigits, k.Index, offsetDigits, k.WrittenMs, checkpointExt)
}

// ParseCheckpointKey parses a key String produced; anything else under
// the prefix is not a checkpoint and is an error.
func ParseCheckpointKey(key string) (CheckpointKey, error) {
	rest, ok := strings.CutPrefix(key, checkpointsPrefix)
	if !ok {
		return CheckpointKey{}, fmt.Errorf("%w: %q is not under %s", errKey, key, checkpointsPrefix)
	}
	rest, ok = strings.CutSuffix(rest, checkpointExt)
	history, rest, ok1 := strings.Cut(rest, "/")
	idx, ms, ok2 := strings.Cut(rest, "-")
	if !ok || !ok1 || !validHistory(history) || !ok2 || len(idx) != offsetDigits || len(ms) != offsetDigits {
		return CheckpointKey{}, fmt.Errorf("%w: %q is not a checkpoint key", errKey, key)
	}
	i, ok := parseDigits(idx)
	m, ok2 := parseDigits(ms)
	if !ok || !ok2 {
		return CheckpointKey{}, fmt.Errorf("%w: %q is not a checkpoint key", errKey, key)
	}
	return CheckpointKey{History: history, Index: uint64(i), WrittenMs: m}, nil
}

// validHistory reports whether h is a history id: 32 lowercase hex
// digits.
func validHistory(h string) bool {
	_, ok := parseHex(h) // lowercase only
	return ok
}

// Checkpoint is the cluster's metadata at one raft index.
type Checkpoint struct {
	Version   int    `json:"version"`
	ClusterID string `json:"cluster_id"`
	// History names the metadata history the state belongs to; it
	// matches the key's.
	History string `json:"history"`
	// Index is the raft index of the state; it matches the key's.
	Index     uint64 `json:"index"`
	WrittenMs int64  `json:"written_ms"`
	// WrittenBy is the node id of the controller that wrote it.
	WrittenBy int32 `json:"written_by"`
	// NextProducerID is the first idempotent-producer id the cluster had
	// not handed out: the restored partitions remember producers below it,
	// so a restored cluster must not hand those ids out again.
	NextProducerID int64             `json:"next_producer_id"`
	Topics         []CheckpointTopic `json:"topics"`
}

// NamesUserTopic reports whether c names a topic that is not internal.
func (c *Checkpoint) NamesUserTopic() bool {
	for _, t := range c.Topics {
		if !t.Internal {
			return true
		}
	}
	return false
}

// CheckpointTopic is one topic of a checkpoint.
type CheckpointTopic struct {
	Name string `json:"name"`
	// ID is the topic id as 32 lowercase hex digits, as in keys.
	ID                string                `json:"id"`
	Internal          bool                  `json:"internal,omitempty"`
	ReplicationFactor int16                 `json:"replication_factor"`
	Configs           map[string]string     `json:"configs"`
	Partitions        []CheckpointPartition `json:"partitions"`
}

// TopicID decodes ID.
func (t CheckpointTopic) TopicID() [16]byte {
	id, _ := parseHex(t.ID) // ParseCheckpoint checked it
	return id
}

// CheckpointPartition is one partition of a checkpoint topic.
type CheckpointPartition struct {
	Partition int32   `json:"partition"`
	Replicas  []int32 `json:"replicas"`
	// LeaderEpoch is the partition's leader epoch in the metadata. A
	// restore starts above both it and the newest manifest's epoch, so
	// that the restored leader's manifests sort above every old one.
	LeaderEpoch int32 `json:"leader_epoch"`
	// Manifest is the partition's manifest version this checkpoint was
	// taken against ("<epoch>-<seq>", the key's last component without
	// its extension), empty when the partition had none (nothing tiered,
	// or the topic does not tier). LogStart and End are that manifest's
	// log start and end offsets (0 and 0 without one).
	Manifest string `json:"manifest,omitempty"`
	LogStart int64  `json:"log_start"`
	End      int64  `json:"end"`
}

// ManifestVersion parses Manifest: ok is false when there is none.
func (p CheckpointPartition) ManifestVersion() (epoch int32, seq int64, ok bool) {
	e, s, found := strings.Cut(p.Manifest, "-")
	if !found {
		return 0, 0, false
	}
	ei, ok1 := parseDigits(e)
	si, ok2 := parseDigits(s)
	if !ok1 || !ok2 || ei > 1<<31-1 {
		return 0, 0, false
	}
	return int32(ei), si, true
}

// ManifestVersionOf spells a manifest key's version as Manifest does.
func ManifestVersionOf(k ManifestKey) string {
	return fmt.Sprintf("%0*d-%0*d", epochDigits, k.LeaderEpoch, offsetDigits, k.Seq)
}

// ErrCheckpoint wraps every reason a checkpoint does not parse.
var ErrCheckpoint = errors.New("format: bad metadata checkpoint")

// EncodeCheckpoint returns a checkpoint object: one line of JSON, then
// the trailer manifests end with, "crc32c:<8 hex digits>\n", the CRC-32C
// of the first line (its newline included).
func EncodeCheckpoint(c *Checkpoint) ([]byte, error) {
	v := *c
	v.Version = checkpointVersion
	if err := v.validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(&v)
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	sum := crc32.Checksum(b, castagnoli)
	return fmt.Appendf(b, "%s%08x\n", trailerPrefix, sum), nil
}

// ParseCheckpoint decodes and checks a checkpoint object. A version this
// reader does not know is refused rather than misread; unknown fields of
// a known version are ignored.
func ParseCheckpoint(b []byte) (*Checkpoint, error) {
	if len(b) > MaxCheckpointBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrCheckpoint, len(b))
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, fmt.Errorf("%w: no checksum line", ErrCheckpoint)
	}
	body, tail := b[:i+1], b[i+1:]
	hexSum, ok := bytes.CutPrefix(tail, []byte(trailerPrefix))
	if !ok || len(tail) != trailerSize || tail[trailerSize-1] != '\n' {
		return nil, fmt.Errorf("%w: no checksum line", ErrCheckpoint)
	}
	hexSum = hexSum[:8]
	want, err := strconv.ParseUint(string(hexSum), 16, 32)
	if err != nil {
		return nil, fmt.Errorf("%w: checksum %q", ErrCheckpoint, hexSum)
	}
	if got := crc32.Checksum(body, castagnoli); got != uint32(want) {
		return nil, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", ErrCheckpoint, want, got)
	}
	var c Checkpoint
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if c.Version < 1 || c.Version > checkpointVersion {
		return nil, fmt.Errorf("%w: format version %d (this reader knows 1 to %d)", ErrCheckpoint, c.Version, checkpointVersion)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Checkpoint) validate() error {
	if c.ClusterID == "" {
		return fmt.Errorf("%w: no cluster_id", ErrCheckpoint)
	}
	if !validHistory(c.History) {
		return fmt.Errorf("%w: history %q is not 32 lowercase hex digits", ErrCheckpoint, c.History)
	}
	if c.NextProducerID < 0 {
		return fmt.Errorf("%w: negative next_producer_id", ErrCheckpoint)
	}
	names := make(map[string]bool, len(c.Topics))
	for _, t := range c.Topics {
		if err := validateTopic(t.Name); err != nil {
			return fmt.Errorf("%w: %v", ErrCheckpoint, err)
		}
		if names[t.Name] {
			return fmt.Errorf("%w: topic %q twice", ErrCheckpoint, t.Name)
		}
		names[t.Name] = true
		if id, ok := parseHex(t.ID); !ok || id == ([16]byte{}) {
			return fmt.Errorf("%w: topic %q has id %q", ErrCheckpoint, t.Name, t.ID)
		}
		if t.ReplicationFactor < 1 {
			return fmt.Errorf("%w: topic %q has replication factor %d", ErrCheckpoint, t.Name, t.ReplicationFactor)
		}
		if len(t.Partitions) == 0 {
			return fmt.Errorf("%w: topic %q has no partitions", ErrCheckpoint, t.Name)
		}
		for i, p := range t.Partitions {
			if p.Partition != int32(i) {
				return fmt.Errorf("%w: topic %q lists partition %d at position %d", ErrCheckpoint, t.Name, p.Partition, i)
			}
			if p.LeaderEpoch < 0 || p.LogStart < 0 || p.End < p.LogStart {
				return fmt.Errorf("%w: %s-%d: epoch %d, offsets [%d, %d)", ErrCheckpoint, t.Name, i, p.LeaderEpoch, p.LogStart, p.End)
			}
			if _, _, ok := p.ManifestVersion(); p.Manifest != "" && !ok {
				return fmt.Errorf("%w: %s-%d: manifest version %q", ErrCheckpoint, t.Name, i, p.Manifest)
			}
		}
	}
	return nil
}

// HexID spells a topic id as checkpoints and keys do.
func HexID(id [16]byte) string { return hex.EncodeToString(id[:]) }
