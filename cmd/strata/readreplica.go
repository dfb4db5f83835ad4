package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"strata/cmd/internal/config"
	"strata/tier/objstore"
)

// sourceOpener opens the bucket a read replica's source URI names,
// read-only: a directory (file:///dir) as it is, an S3 bucket
// (s3://bucket/prefix) with the node's own S3 settings for whatever the
// URI leaves out (endpoint, region, addressing style) and always the
// node's credentials (STRATA_S3_ACCESS_KEY and STRATA_S3_SECRET_KEY, or
// the AWS default chain): a URI never carries a key.
//
// A URI may name another endpoint (?endpoint=) only when it is the node's
// own or one of allowed (read_replica.allowed_endpoints): whoever may
// create a topic may write a source URI, and the node signs its requests
// with its own keys, so an endpoint of the client's choosing would have
// the broker send them anywhere.
func sourceOpener(node config.S3, allowed []string) func(ctx context.Context, uri string) (objstore.Store, error) {
	return func(ctx context.Context, uri string) (objstore.Store, error) {
		loc, err := objstore.ParseURI(uri)
		if err != nil {
			return nil, err
		}
		if loc.Dir != "" {
			return objstore.OpenDirReadOnly(loc.Dir)
		}
		if err := endpointAllowed(node, allowed, loc); err != nil {
			return nil, err
		}
		st, err := objstore.NewS3(ctx, sourceS3(node, loc))
		if err != nil {
			if errors.Is(err, objstore.ErrNoCredentials) {
				err = fmt.Errorf("set %s and %s, or give the AWS default chain credentials: %w", config.EnvS3AccessKey, config.EnvS3SecretKey, err)
			}
			return nil, err
		}
		return objstore.ReadOnly(objstore.WithRetry(st, s3Retry)), nil
	}
}

// endpointAllowed refuses a source URI naming an S3 endpoint that is
// neither the node's own nor one of allowed.
func endpointAllowed(node config.S3, allowed []string, loc objstore.Location) error {
	if !loc.Endpoint {
		return nil
	}
	ep := strings.TrimSuffix(loc.S3.Endpoint, "/")
	if ep == strings.TrimSuffix(node.Endpoint, "/") || slices.Contains(allowed, ep) {
		return nil
	}
	return fmt.Errorf("endpoint %s is not this node's S3 endpoint nor in read_replica.allowed_endpoints (the node would send it requests signed with its own keys)", ep)
}

// sourceS3 is the S3 configuration of an s3:// source: the URI's bucket
// and prefix, its endpoint, region and addressing style where it gives
// them, the node's settings for the rest, and always the node's keys.
func sourceS3(node config.S3, loc objstore.Location) objstore.S3Config {
	c := s3Config(node)
	c.Bucket, c.Prefix = loc.S3.Bucket, loc.S3.Prefix
	if loc.Endpoint {
		c.Endpoint = loc.S3.Endpoint
	}
	if loc.Region {
		c.Region = loc.S3.Region
	}
	if loc.PathStyle {
		c.PathStyle = loc.S3.PathStyle
	}
	return c
}

// sourceNotifier follows an S3 source's new objects by MinIO's bucket
// notifications (objstore.ListenMinIO) when on is set (the
// read_replica.notifications setting), nil otherwise. A directory source
// has none (errors.ErrUnsupported: it is polled alone).
func sourceNotifier(node config.S3, allowed []string, on bool) func(ctx context.Context, uri string, fn func(key string)) error {
	if !on {
		return nil
	}
	return func(ctx context.Context, uri string, fn func(key string)) error {
		loc, err := objstore.ParseURI(uri)
		if err != nil {
			return err
		}
		if loc.Dir != "" {
			return fmt.Errorf("a directory source has no bucket notifications: %w", errors.ErrUnsupported)
		}
		if err := endpointAllowed(node, allowed, loc); err != nil {
			return err
		}
		return objstore.ListenMinIO(ctx, sourceS3(node, loc), ".manifest", fn)
	}
}
