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
	m, _, ok, err = ReadManifestAfter(ctx, store, tp, "")
	return m, ok, err
}

// ReadManifestAfter is ReadManifest among the manifest keys above after
// (a manifest key, or "" for all): ok is false when there is none newer.
// Listing from a version already known costs a LIST that returns nothing
// when the partition has not moved, however many versions the orphan
// grace keeps behind it. key is the manifest's.
func ReadManifestAfter(ctx context.Context, store objstore.Store, tp format.TopicPartition, after string) (m *format.Root, key string, ok bool, err error) {
	err = objstore.ListAfter(ctx, store, tp.ManifestsPrefix(), after, func(a objstore.Attrs) error {
		if _, err := format.ParseManifestKey(a.Key); err == nil {
			key = a.Key // in key order: the last is the newest
		}
		return nil
	})
	if err != nil {
		return nil, "", false, fmt.Errorf("list manifests of %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	if key == "" {
		return nil, "", false, nil
	}
	m, err = GetManifest(ctx, store, key)
	if err != nil {
		return nil, "", false, err
	}
	if m.TopicPartition != tp {
		return nil, "", false, fmt.Errorf("manifest %s describes %s-%d", key, m.Topic, m.Partition)
	}
	return m, key, true, nil
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
