package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// ListenMinIO follows the objects created in c's bucket under c.Prefix
// through MinIO's bucket notifications (ListenBucketNotification, an
// extension of MinIO's that other S3 stores lack): it calls fn with the
// key of each, relative to c.Prefix as the store c opens names it, until
// ctx ends (nil) or the listen fails (the error: a store that is not
// MinIO fails at once or at its first answer). Notifications may be
// lost and come late; they say what to read soon, never what exists.
func ListenMinIO(ctx context.Context, c S3Config, suffix string, fn func(key string)) error {
	if c.Endpoint == "" {
		return errors.New("objstore: bucket notifications need a MinIO endpoint (AWS S3 has none)")
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("objstore: endpoint %q: want http://host:port or https://host:port", c.Endpoint)
	}
	creds := credentials.NewStaticV4(c.AccessKey, c.SecretKey, "")
	if c.AccessKey == "" {
		creds = credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}})
	}
	lookup := minio.BucketLookupAuto
	if c.PathStyle {
		lookup = minio.BucketLookupPath
	}
	cl, err := minio.New(u.Host, &minio.Options{Creds: creds, Secure: u.Scheme == "https", Region: c.Region, BucketLookup: lookup})
	if err != nil {
		return fmt.Errorf("objstore: MinIO client for %s: %w", c.Endpoint, err)
	}
	prefix := strings.TrimSuffix(c.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends minio-go's goroutine, which then closes the channel
	for info := range cl.ListenBucketNotification(ctx, c.Bucket, prefix, suffix, []string{"s3:ObjectCreated:*"}) {
		if info.Err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("objstore: bucket notifications from %s/%s: %w", c.Endpoint, c.Bucket, info.Err)
		}
		for _, ev := range info.Records {
			// Event records carry the key URL-encoded.
			key, err := url.QueryUnescape(ev.S3.Object.Key)
			if err != nil {
				continue
			}
			if rel, ok := strings.CutPrefix(key, prefix); ok {
				fn(rel)
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("objstore: bucket notifications from %s/%s ended", c.Endpoint, c.Bucket)
}
