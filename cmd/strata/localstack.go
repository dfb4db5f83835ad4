package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"strata/cmd/internal/config"
	"strata/localstack"
)

// newLocalstackCmd mounts package localstack's command tree (whose `s3`
// subcommand serves S3 alone) and gives its root the job the package leaves
// to cmd, which owns the broker's flags: an S3 endpoint and a development
// broker tiering into it, in one process.
func newLocalstackCmd(environ []string, stdout, stderr io.Writer) *cobra.Command {
	var (
		dev                       devNode
		s3Listen, s3Dir, s3Bucket string
	)
	cmd := mount(localstack.Command())
	cmd.Short = "Run an S3 endpoint and a development broker tiering into it"
	cmd.Long = `Run, in one process, a real S3 endpoint on loopback (objects on disk under
<data-dir>/s3) and a development broker (like strata dev) whose cold tier is a
bucket on that endpoint. The bootstrap line comes first on stdout, then how to
reach the bucket with the AWS CLI and the tier verbs. Ctrl-C or SIGTERM stops
both cleanly.

'strata localstack s3' serves the S3 endpoint alone.`
	cmd.Example = `  strata localstack
  strata localstack --data-dir /tmp/strata --listen 127.0.0.1:0 --s3-listen 127.0.0.1:0`
	f := cmd.Flags()
	dev.addFlags(f, "directory for the logs, the metadata and the S3 objects")
	f.StringVar(&s3Listen, "s3-listen", "127.0.0.1:9000", "S3 endpoint address (port 0 picks a free port)")
	f.StringVar(&s3Dir, "s3-dir", "", "keep the S3 objects under this directory (default <data-dir>/s3)")
	f.StringVar(&s3Bucket, "s3-bucket", "strata", "bucket to create and tier into")
	tierFlags := config.AddFlagsFor(f, false, "tier")
	// The cold tier here is the local S3 endpoint's bucket, never a
	// directory store.
	_ = f.MarkHidden("bucket-dir")

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := dev.config(cmd, stderr)
		if err != nil {
			return err
		}
		// The environment only for its warnings: the keys used are the
		// local server's own, not the user's STRATA_S3_* (which may name
		// some other S3, and are not checked here).
		env := slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
			return strings.HasPrefix(kv, config.EnvS3AccessKey+"=") || strings.HasPrefix(kv, config.EnvS3SecretKey+"=")
		})
		c, warnings, err := loadFlagsOnly(cmd, env, tierFlags)
		if err != nil {
			return err
		}
		if c.Tier.BucketDir != "" {
			return cmd.FlagErrorFunc()(cmd, fmt.Errorf("--bucket-dir: the cold tier of strata localstack is its S3 bucket (use --s3-dir to place its objects)"))
		}
		for _, w := range warnings {
			cfg.Logger.Warn(w)
		}
		if s3Dir == "" {
			s3Dir = filepath.Join(dev.dataDir, "s3")
		}
		s3, stopS3, err := localstack.Start(cmd.Context(), localstack.Options{Listen: s3Listen, Dir: s3Dir, Bucket: s3Bucket})
		if err != nil {
			return err
		}
		runErr := runNode(cmd.Context(), nodeRun{
			name: "strata localstack",
			cfg:  cfg,
			s3: config.S3{
				Endpoint: s3.Endpoint, Region: s3.Region, Bucket: s3.Bucket, PathStyle: true,
				AccessKey: s3.AccessKey, SecretKey: s3.SecretKey,
			},
			tier:     c.Tier,
			announce: func(w io.Writer, bootstrap string) { announceLocalS3(w, s3, s3Dir, bootstrap) },
		}, stdout)
		// The broker is closed by now: nothing uploads any more.
		if err := stopS3(); err != nil && runErr == nil {
			runErr = fmt.Errorf("stop S3: %w", err)
		}
		return runErr
	}
	return cmd
}

// announceLocalS3 tells the developer how to look at the bucket. The keys
// are printed because the in-process server's keys are fixed and unchecked:
// they protect nothing.
func announceLocalS3(w io.Writer, s *localstack.S3, dir, bootstrap string) {
	fmt.Fprintf(w, "S3 endpoint %s, bucket %q, objects in %s\n", s.Endpoint, s.Bucket, dir)
	fmt.Fprintf(w, "\nthe bucket with the AWS CLI:\n")
	fmt.Fprintf(w, "  export AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s AWS_REGION=%s\n", s.AccessKey, s.SecretKey, s.Region)
	fmt.Fprintf(w, "  aws --endpoint-url %s s3 ls --recursive s3://%s/\n", s.Endpoint, s.Bucket)
	fmt.Fprintf(w, "\nthe tier verbs (strata tier status, ls, verify):\n")
	fmt.Fprintf(w, "  export %s=%s\n", config.EnvBootstrap, bootstrap)
	fmt.Fprintf(w, "  export %s=%s %s=%s\n", localstack.EnvEndpoint, s.Endpoint, localstack.EnvBucket, s.Bucket)
	fmt.Fprintf(w, "  export %s=%s %s=%s\n", config.EnvS3AccessKey, s.AccessKey, config.EnvS3SecretKey, s.SecretKey)
	fmt.Fprintf(w, "\nCtrl-C stops the broker and the S3 endpoint.\n")
}
