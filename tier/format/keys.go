package format

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Key layout, relative to the root of the store (an object store applies
// its own configured prefix, such as --s3-prefix, on top):
//
//	<h>/<topic>-<topicID>/<partition>/segments/<base>-<epoch>-<uid>.seg
//	<h>/<topic>-<topicID>/<partition>/manifests/<epoch>-<seq>.manifest
//
// <h> spreads partitions over the store's key space (S3 partitions its
// request rate by key prefix). It hashes the topic name rather than the
// topic ID so that a reader who knows only a topic's name can compute where
// its partitions live; the topic ID in the next component still keeps a
// re-created topic's data apart from the old one's.
const (
	segmentsDir   = "segments"
	manifestsDir  = "manifests"
	segmentExt    = ".seg"
	manifestExt   = ".manifest"
	maxTopicLen   = 249
	hashPrefixLen = 4
	offsetDigits  = 20
	epochDigits   = 10
)

// TopicPartition names a partition in the bucket. The topic ID is part of
// the name because a topic deleted and re-created under the same name is a
// different topic (KIP-516).
type TopicPartition struct {
	Topic     string
	TopicID   [16]byte
	Partition int32
}

// Validate reports whether tp can be used in a key: a legal Kafka topic
// name, a non-zero topic ID and a non-negative partition.
func (tp TopicPartition) Validate() error {
	if err := validateTopic(tp.Topic); err != nil {
		return err
	}
	if tp.TopicID == ([16]byte{}) {
		return fmt.Errorf("format: topic %q has a zero topic ID", tp.Topic)
	}
	if tp.Partition < 0 {
		return fmt.Errorf("format: negative partition %d", tp.Partition)
	}
	return nil
}

// validateTopic applies Kafka's topic name rules, which also make the name
// safe as one key component.
func validateTopic(t string) error {
	if t == "" || len(t) > maxTopicLen || t == "." || t == ".." {
		return fmt.Errorf("format: illegal topic name %q", t)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("format: illegal character %q in topic name %q", c, t)
		}
	}
	return nil
}

// HashPrefix returns <h>: the first four lowercase hex digits of
// SHA-256("<topic>/<partition>"), partition in decimal.
func (tp TopicPartition) HashPrefix() string {
	sum := sha256.Sum256([]byte(tp.Topic + "/" + strconv.FormatInt(int64(tp.Partition), 10)))
	return hex.EncodeToString(sum[:hashPrefixLen/2])
}

// Prefix returns "<h>/<topic>-<topicID>/<partition>/": every object of the
// partition, segments and manifests, lies under it.
func (tp TopicPartition) Prefix() string {
	return tp.HashPrefix() + "/" + tp.Topic + "-" + hex.EncodeToString(tp.TopicID[:]) + "/" +
		strconv.FormatInt(int64(tp.Partition), 10) + "/"
}

// SegmentsPrefix returns the prefix to list to find the partition's segment
// objects, in base offset order.
func (tp TopicPartition) SegmentsPrefix() string { return tp.Prefix() + segmentsDir + "/" }

// ManifestsPrefix returns the prefix to list to find the partition's
// manifests; the lexically largest key under it is the current manifest.
func (tp TopicPartition) ManifestsPrefix() string { return tp.Prefix() + manifestsDir + "/" }

// SegmentKey identifies one segment object. BaseOffset and LeaderEpoch must
// be non-negative and tp valid for String to give a key ParseSegmentKey
// accepts; Manifest.Validate checks every key it references.
type SegmentKey struct {
	TopicPartition
	BaseOffset int64
	// LeaderEpoch is the epoch of the leader that uploaded the segment.
	LeaderEpoch int32
	// UID makes the key unique even if two leaders upload the same range:
	// an upload never overwrites an object.
	UID [16]byte
}

// String returns the object key.
func (k SegmentKey) String() string {
	return fmt.Sprintf("%s%0*d-%0*d-%s%s", k.SegmentsPrefix(), offsetDigits, k.BaseOffset,
		epochDigits, k.LeaderEpoch, hex.EncodeToString(k.UID[:]), segmentExt)
}

// ManifestKey identifies one version of a partition's manifest. Manifests
// are never overwritten: each publication writes a new key, and keys sort
// by (LeaderEpoch, Seq), so a deposed leader's late write (a lower epoch)
// never sorts above what a newer leader wrote.
type ManifestKey struct {
	TopicPartition
	// LeaderEpoch is the epoch of the leader that wrote the manifest.
	LeaderEpoch int32
	Seq         int64
}

// String returns the object key.
func (k ManifestKey) String() string {
	return fmt.Sprintf("%s%0*d-%0*d%s", k.ManifestsPrefix(), epochDigits, k.LeaderEpoch,
		offsetDigits, k.Seq, manifestExt)
}

// NewUID returns 16 random bytes for a SegmentKey.
func NewUID() [16]byte {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails (Go 1.24+)
	return u
}

var errKey = errors.New("format: malformed key")

// ParseSegmentKey parses a key made by SegmentKey.String. It rejects any
// other spelling, so String(ParseSegmentKey(k)) == k.
func ParseSegmentKey(key string) (SegmentKey, error) {
	tp, name, err := parseKey(key, segmentsDir)
	if err != nil {
		return SegmentKey{}, err
	}
	// <base 20>-<epoch 10>-<uid 32>.seg
	const n = offsetDigits + 1 + epochDigits + 1 + 32 + len(segmentExt)
	if len(name) != n || name[offsetDigits] != '-' || name[offsetDigits+1+epochDigits] != '-' ||
		!strings.HasSuffix(name, segmentExt) {
		return SegmentKey{}, fmt.Errorf("%w: segment name %q", errKey, name)
	}
	k := SegmentKey{TopicPartition: tp}
	base, ok1 := parseDigits(name[:offsetDigits])
	epoch, ok2 := parseDigits(name[offsetDigits+1 : offsetDigits+1+epochDigits])
	uid, ok3 := parseHex(name[offsetDigits+1+epochDigits+1 : n-len(segmentExt)])
	if !ok1 || !ok2 || !ok3 || epoch > maxInt32 {
		return SegmentKey{}, fmt.Errorf("%w: segment name %q", errKey, name)
	}
	k.BaseOffset, k.LeaderEpoch, k.UID = base, int32(epoch), uid
	return k, nil
}

// ParseManifestKey parses a key made by ManifestKey.String. It rejects any
// other spelling, so String(ParseManifestKey(k)) == k.
func ParseManifestKey(key string) (ManifestKey, error) {
	tp, name, err := parseKey(key, manifestsDir)
	if err != nil {
		return ManifestKey{}, err
	}
	// <epoch 10>-<seq 20>.manifest
	const n = epochDigits + 1 + offsetDigits + len(manifestExt)
	if len(name) != n || name[epochDigits] != '-' || !strings.HasSuffix(name, manifestExt) {
		return ManifestKey{}, fmt.Errorf("%w: manifest name %q", errKey, name)
	}
	epoch, ok1 := parseDigits(name[:epochDigits])
	seq, ok2 := parseDigits(name[epochDigits+1 : n-len(manifestExt)])
	if !ok1 || !ok2 || epoch > maxInt32 {
		return ManifestKey{}, fmt.Errorf("%w: manifest name %q", errKey, name)
	}
	return ManifestKey{TopicPartition: tp, LeaderEpoch: int32(epoch), Seq: seq}, nil
}

const maxInt32 = 1<<31 - 1

// parseKey splits "<h>/<topic>-<id>/<partition>/<dir>/<name>" and checks
// every component, the hash included.
func parseKey(key, dir string) (TopicPartition, string, error) {
	parts := strings.Split(key, "/")
	if len(parts) != 5 || parts[3] != dir {
		return TopicPartition{}, "", fmt.Errorf("%w: %q is not a %s key", errKey, key, dir)
	}
	var tp TopicPartition
	tid := parts[1]
	// The topic ID is the last 32 characters, so topic names may contain '-'.
	if len(tid) < 1+1+32 || tid[len(tid)-33] != '-' {
		return TopicPartition{}, "", fmt.Errorf("%w: %q: no <topic>-<topicID>", errKey, key)
	}
	tp.Topic = tid[:len(tid)-33]
	id, ok := parseHex(tid[len(tid)-32:])
	if !ok {
		return TopicPartition{}, "", fmt.Errorf("%w: %q: bad topic ID", errKey, key)
	}
	tp.TopicID = id
	p := parts[2]
	if p == "" || len(p) > 10 || (len(p) > 1 && p[0] == '0') {
		return TopicPartition{}, "", fmt.Errorf("%w: %q: bad partition", errKey, key)
	}
	pn, ok := parseDigits(p)
	if !ok || pn > maxInt32 {
		return TopicPartition{}, "", fmt.Errorf("%w: %q: bad partition", errKey, key)
	}
	tp.Partition = int32(pn)
	if err := tp.Validate(); err != nil {
		return TopicPartition{}, "", fmt.Errorf("%w: %q: %w", errKey, key, err)
	}
	if parts[0] != tp.HashPrefix() {
		return TopicPartition{}, "", fmt.Errorf("%w: %q: hash prefix %q, want %q", errKey, key, parts[0], tp.HashPrefix())
	}
	return tp, parts[4], nil
}

// parseDigits parses a non-empty string of ASCII digits into a
// non-negative int64.
func parseDigits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (1<<63-1-int64(c-'0'))/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseHex parses exactly 32 lowercase hex digits.
func parseHex(s string) ([16]byte, bool) {
	var b [16]byte
	if len(s) != 32 {
		return b, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return b, false
		}
	}
	_, err := hex.Decode(b[:], []byte(s))
	return b, err == nil
}
