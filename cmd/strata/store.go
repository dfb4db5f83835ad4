package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/broker"
	"strata/cmd/internal/config"
	"strata/tier/objstore"
)

// bucketDir is where a node without S3 settings keeps its cold tier: the
// local-directory store, laid out exactly like a bucket. It is the
// tier.bucket_dir setting when given (a bucket several nodes share), else
// <data-dir>/bucket.
func bucketDir(t config.Tier, dataDir string) string {
	if t.BucketDir != "" {
		return t.BucketDir
	}
	return filepath.Join(dataDir, "bucket")
}

// s3Retry is the retry policy around the S3 backend. It is the only retry
// layer (the SDK's own retries are turned off in s3Config): the decorator
// bounds each attempt, resumes a GET body that breaks mid-read, and
// stacking it on the SDK's retries would multiply the attempts. Five
// attempts with backoff up to 5s ride out a server restart; a longer outage
// is the uploader's to wait out, keeping data local meanwhile.
var s3Retry = objstore.RetryPolicy{
	Attempts:       5,
	Backoff:        100 * time.Millisecond,
	MaxBackoff:     5 * time.Second,
	AttemptTimeout: objstore.DefaultRequestTimeout,
}

// s3Config maps the operator's settings onto the S3 backend's.
func s3Config(c config.S3) objstore.S3Config {
	return objstore.S3Config{
		Endpoint:   c.Endpoint,
		Region:     c.Region,
		Bucket:     c.Bucket,
		Prefix:     c.Prefix,
		PathStyle:  c.PathStyle,
		AccessKey:  c.AccessKey,
		SecretKey:  c.SecretKey,
		MaxRetries: -1, // see s3Retry

		CAFile:      c.CAFile,
		SSE:         c.SSE,
		SSEKMSKeyID: c.SSEKMSKeyID,
	}
}

// openStore opens the object store the settings name: the S3 bucket when
// one is set, else the directory store dir (see bucketDir). For S3 it checks at
// once that the endpoint answers and the bucket exists, so a wrong setting
// fails start-up in seconds with one line instead of failing every upload
// later. Requests are counted in m when it is not nil. The returned string
// says where the store is, without any key, for the log and the banner.
func openStore(ctx context.Context, c config.S3, dataDir, dir string, m *objstore.Metrics) (objstore.Store, string, error) {
	var (
		st    objstore.Store
		where string
		err   error
	)
	if c.Bucket == "" {
		// The data dir first, so a bad one is reported as such, in the
		// broker's words, rather than as a bucket problem.
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, "", fmt.Errorf("data dir %s: %w", dataDir, err)
		}
		where = dir
		if st, err = objstore.NewDir(where); err != nil {
			return nil, "", err
		}
	} else {
		if st, err = objstore.NewS3(ctx, s3Config(c)); err != nil {
			if errors.Is(err, objstore.ErrNoCredentials) {
				err = fmt.Errorf("set %s and %s, or give the AWS default chain credentials: %w", config.EnvS3AccessKey, config.EnvS3SecretKey, err)
			}
			return nil, "", err
		}
		where = "s3://" + c.Bucket
		if c.Prefix != "" {
			where += "/" + c.Prefix
		}
		if c.Endpoint != "" {
			where += " at " + c.Endpoint
		}
	}
	// Metrics sit under the retries, so they count the requests actually
	// sent: the figure the request bill (and docs/benchmarks.md) is about.
	if m != nil {
		st = objstore.WithMetrics(st, m)
	}
	if c.Bucket != "" {
		st = objstore.WithRetry(st, s3Retry)
	}
	return st, where, nil
}

// openExistingStore opens the store for the inspection verbs (tier,
// bucket) read-only: they must not create an empty directory store where
// an operator mistyped a path and then report that it holds nothing, nor
// tidy the staging files of a bucket a running broker writes, and
// read-only credentials must be enough for them.
// It also returns where the store is, as openStore does.
func openExistingStore(ctx context.Context, c config.S3, t config.Tier, dataDir string) (objstore.Store, string, error) {
	if dataDir == "" {
		dataDir = defaultDevDataDir
	}
	dir := bucketDir(t, dataDir)
	if c.Bucket == "" {
		if _, err := os.Stat(dir); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, "", fmt.Errorf("no bucket directory %s (give the node's --data-dir or --bucket-dir, or --s3-bucket for S3)", dir)
			}
			return nil, "", err
		}
		// Say where, whatever the working directory: a relative
		// ./strata-data is the leftover the operator must recognise.
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		st, err := objstore.OpenDirReadOnly(dir)
		return st, dir, err
	}
	st, where, err := openStore(ctx, c, dataDir, dir, nil)
	if err != nil {
		return nil, "", err
	}
	return objstore.ReadOnly(st), where, nil
}

// tierConfig is the broker's tier configuration for the settings c over
// store; a disabled tier is a nil store, which keeps every log local.
func tierConfig(c config.Tier, store objstore.Store) broker.TierConfig {
	if !c.Enabled {
		return broker.TierConfig{}
	}
	readAhead := c.ReadAhead
	if readAhead == 0 {
		readAhead = -1 // the tier reads 0 as its default; the operator meant none
	}
	return broker.TierConfig{
		Store:              store,
		ChunkBytes:         c.ChunkBytes,
		MemoryBytes:        c.MemoryBytes,
		CacheBytes:         c.CacheBytes,
		ManifestCacheBytes: c.ManifestCacheBytes,
		ReadAhead:          readAhead,
		ReadWorkers:        c.ReadWorkers,
		UploadInterval:     c.UploadInterval,
		IdleUpload:         c.IdleUpload,
		OrphanGrace:        c.OrphanGrace,
		CollectInterval:    c.CollectInterval,
		LocalDiskLimit:     c.LocalDiskLimit,

		CheckpointInterval:  c.MetadataCheckpointInterval,
		CheckpointRetention: c.MetadataCheckpointRetention,

		TestShortOrphanGrace: c.TestShortOrphanGrace,
	}
}

// withStore opens the object store of a node about to start and wires it,
// with its request metrics, into cfg. It gives the broker a registry of
// cmd's own so that the store's metrics are served on the same /metrics.
// It returns where the store is ("" when the tier is off).
func withStore(ctx context.Context, cfg broker.Config, s3 config.S3, t config.Tier) (broker.Config, string, error) {
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	if cfg.ReadReplica.Open == nil {
		cfg.ReadReplica.Open = sourceOpener(s3, nil) // read replicas' sources, tier or not
	}
	if !t.Enabled {
		cfg.Logger.Info("tiered storage off: logs stay on local disk")
		return cfg, "", nil
	}
	m := objstore.NewMetrics()
	if err := reg.Register(m); err != nil {
		return cfg, "", fmt.Errorf("object store metrics: %w", err)
	}
	st, where, err := openStore(ctx, s3, cfg.DataDir, bucketDir(t, cfg.DataDir), m)
	if err != nil {
		return cfg, "", err // objstore's errors say what and where
	}
	cfg.Tier = tierConfig(t, st)
	cfg.Tier.Where = where
	cfg.Logger.Info("tiered storage on", "store", where, "credentials", credentialsSource(s3))
	return cfg, where, nil
}

// credentialsSource says where the S3 keys come from, never what they are.
func credentialsSource(c config.S3) string {
	switch {
	case c.Bucket == "":
		return "none (directory store)"
	case c.AccessKey != "":
		return config.EnvS3AccessKey + " and " + config.EnvS3SecretKey
	}
	return "AWS default chain"
}
