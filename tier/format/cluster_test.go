package format

import (
	"errors"
	"fmt"
	"testing"
)

// TestParseCluster: the cluster object's decoder refuses what it cannot
// vouch for instead of guessing a cluster id.
func TestParseCluster(t *testing.T) {
	b, err := Cluster{ClusterID: "Qpf_INRvSWqY8QWSqDtxRQ", CreatedMs: 1796216529360, CreatedBy: 3}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCluster(b)
	if err != nil || c.Version != 1 || c.ClusterID != "Qpf_INRvSWqY8QWSqDtxRQ" || c.CreatedMs != 1796216529360 || c.CreatedBy != 3 {
		t.Fatalf("round trip: %+v, %v", c, err)
	}
	for _, bad := range []string{
		``,
		`{`,
		`{"version":1}`,
		`{"version":2,"cluster_id":"x"}`,
		`{"cluster_id":"x"}`,
		fmt.Sprintf(`{"version":1,"cluster_id":"%0*d"}`, 5000, 0),
	} {
		if c, err := ParseCluster([]byte(bad)); !errors.Is(err, ErrClusterObject) {
			t.Errorf("ParseCluster(%.40q) = %+v, %v; want ErrClusterObject", bad, c, err)
		}
	}
	// Fields a later writer of version 1 adds are ignored.
	if c, err := ParseCluster([]byte(`{"version":1,"cluster_id":"x","region":"eu"}`)); err != nil || c.ClusterID != "x" {
		t.Errorf("unknown field: %+v, %v", c, err)
	}
}
