package tier

import (
	"context"
	"fmt"
	"io"

	"strata/tier/format"
	"strata/tier/objstore"
)

// ReadManifest reads the root of tp's current manifest from store: the one
// under the lexicographically largest manifest key, i.e. the highest
// (leader epoch, sequence). ok is false when the bucket holds no manifest
// of tp. It needs no running broker, so inspection tools use it too;
// NewPageSource reads the pages the root points at.
func ReadManifest(ctx context.Context, store objstore.Store, tp format.TopicPartition) (m *format.Root, ok bool, err error) {
	var newest string
	err = store.List(ctx, tp.ManifestsPrefix(), func(a objstore.Attrs) error {
		if _, err := format.ParseManifestKey(a.Key); err == nil {
			newest = a.Key // List is in key order
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("list manifests of %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	if newest == "" {
		return nil, false, nil
	}
	m, err = GetManifest(ctx, store, newest)
	if err != nil {
		return nil, false, err
	}
	if m.TopicPartition != tp {
		return nil, false, fmt.Errorf("manifest %s describes %s-%d", newest, m.Topic, m.Partition)
	}
	return m, true, nil
}

// GetManifest reads and decodes the manifest root stored under key,
// checking its CRC. A version 1 manifest reads as a root with every
// segment inline.
func GetManifest(ctx context.Context, store objstore.Store, key string) (*format.Root, error) {
	rc, err := store.GetRange(ctx, key, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("get manifest %s: %w", key, err)
	}
	defer rc.Close()
	raw, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("get manifest %s: %w", key, err)
	}
	m, err := format.DecodeRoot(raw)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", key, err)
	}
	return m, nil
}
