package node

import (
	"testing"

	"strata/tier"
	"strata/tier/objstore"
)

// TestSourceBudget: a read-replica source tier gets a quarter of the
// node's tier budgets (the defaults where the node sets none), never less
// than a tier needs.
func TestSourceBudget(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  TierConfig
		want budget
	}{
		{"defaults", TierConfig{}, budget{
			chunk: tier.DefaultChunkBytes, memory: tier.DefaultMemoryBytes / 4,
			cache: tier.DefaultCacheBytes / 4, manifests: tier.DefaultManifestCacheBytes / 4}},
		{"node's settings", TierConfig{ChunkBytes: 1 << 20, MemoryBytes: 64 << 20, CacheBytes: 512 << 20, ManifestCacheBytes: 16 << 20}, budget{
			chunk: 1 << 20, memory: 16 << 20, cache: 128 << 20, manifests: 4 << 20}},
		{"at the floors", TierConfig{ChunkBytes: 8 << 20, MemoryBytes: 16 << 20, CacheBytes: 16 << 20, ManifestCacheBytes: 1 << 20}, budget{
			chunk: 8 << 20, memory: 16 << 20, cache: 16 << 20, manifests: 1 << 20}},
	} {
		if got := sourceBudget(c.cfg); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		// A tier opens with it.
		b := sourceBudget(c.cfg)
		store, err := objstore.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		st, err := tier.Open(tier.Config{Store: store, CacheDir: t.TempDir(), ChunkBytes: b.chunk, MemoryBytes: b.memory, CacheBytes: b.cache, ManifestCacheBytes: b.manifests})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		st.Close()
	}
}
