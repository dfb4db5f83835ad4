package format

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ClusterKey is the key of the bucket's cluster object, at the root of the
// store (under its prefix, if any): the id of the cluster whose bucket this
// is. No partition key can collide with it (those start with 4 hex
// digits and a '/').
const ClusterKey = "cluster.json"

// clusterVersion is the version of the cluster object this code writes
// and the newest it reads.
const clusterVersion = 1

// maxClusterObject bounds what a reader takes of a cluster object: the
// real one is well under 200 bytes.
const maxClusterObject = 4096

// Cluster is the bucket's cluster object (docs/bucket-format.md §11): the
// cluster that owns the bucket, written once by the first broker of that
// cluster to start against it and never replaced.
type Cluster struct {
	Version int `json:"version"`
	// ClusterID is the id of the cluster's metadata (what Metadata and
	// DescribeCluster report).
	ClusterID string `json:"cluster_id"`
	// CreatedMs and CreatedBy say when and by which broker the bucket was
	// claimed, for the operator; readers need neither.
	CreatedMs int64 `json:"created_ms"`
	CreatedBy int32 `json:"created_by"`
}

// ErrClusterObject wraps every reason a cluster object does not parse.
var ErrClusterObject = errors.New("format: bad cluster object")

// Encode returns the object's bytes: one JSON line.
func (c Cluster) Encode() ([]byte, error) {
	if c.ClusterID == "" {
		return nil, fmt.Errorf("%w: empty cluster id", ErrClusterObject)
	}
	c.Version = clusterVersion
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ParseCluster decodes a cluster object. Unknown fields are ignored (a
// later version 1 writer may add some); a newer version is refused rather
// than misread.
func ParseCluster(b []byte) (Cluster, error) {
	var c Cluster
	if len(b) > maxClusterObject {
		return c, fmt.Errorf("%w: %d bytes", ErrClusterObject, len(b))
	}
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&c); err != nil {
		return c, fmt.Errorf("%w: %v", ErrClusterObject, err)
	}
	switch {
	case c.Version < 1 || c.Version > clusterVersion:
		return c, fmt.Errorf("%w: version %d (this reader knows 1 to %d)", ErrClusterObject, c.Version, clusterVersion)
	case c.ClusterID == "":
		return c, fmt.Errorf("%w: no cluster_id", ErrClusterObject)
	}
	return c, nil
}
