package localstack

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Command returns `localstack`, the parent of the local development
// services. Its only subcommand today is `s3`.
//
// Seam for the broker wiring: `strata localstack` on its own is meant to run
// S3 and a broker tiering into it. That RunE belongs to cmd (which owns the
// broker's flags): it calls Start, passes (*S3).Config() to the broker's
// object store, and stops both on exit. Until then it prints help.
func Command() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "localstack",
		Short: "Run Strata's dependencies locally for development",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(s3Command())
	return cmd
}

func s3Command() *cobra.Command {
	var o Options
	cmd := &cobra.Command{
		Use:   "s3",
		Short: "Serve an S3 endpoint on this machine until interrupted",
		Long: `Serve a real S3 HTTP endpoint (in-process, on loopback by default) with
one bucket, for a broker or the test suite to use instead of MinIO or AWS.
Without --dir the objects live in memory and vanish on exit.

The server does not check request signatures: any keys work.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Asking for SIGINT also takes it back when the shell started
			// us with it ignored (`strata localstack s3 &`); SIGTERM must
			// run stop too, or objects being written are cut short.
			ctx, stopSignals := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stopSignals()
			s, stop, err := Start(ctx, o)
			if err != nil {
				return err
			}
			printEnv(cmd.OutOrStdout(), s, o.Dir)
			<-ctx.Done()
			return stop()
		},
	}
	cmd.Flags().StringVar(&o.Dir, "dir", "", "keep objects on disk under `DIR` (default: in memory)")
	cmd.Flags().StringVar(&o.Listen, "listen", "127.0.0.1:9000", "TCP `address` to serve S3 on")
	cmd.Flags().StringVar(&o.Bucket, "bucket", "strata", "`name` of the bucket to create")
	return cmd
}

// printEnv tells the developer how to point Strata and its tests at s. The
// keys are printed because this server's keys are fixed and unchecked.
func printEnv(w io.Writer, s *S3, dir string) {
	where := "memory"
	if dir != "" {
		where = dir
	}
	fmt.Fprintf(w, "S3 endpoint %s, bucket %q, objects in %s. Ctrl-C to stop.\n\n", s.Endpoint, s.Bucket, where)
	fmt.Fprintf(w, "export %s=%s\n", EnvEndpoint, s.Endpoint)
	fmt.Fprintf(w, "export %s=%s\n", EnvBucket, s.Bucket)
	fmt.Fprintf(w, "export %s=%s\n", EnvRegion, s.Region)
	fmt.Fprintf(w, "export %s=%s\n", EnvAccessKey, s.AccessKey)
	fmt.Fprintf(w, "export %s=%s\n", EnvSecretKey, s.SecretKey)
	fmt.Fprintf(w, "\nbroker flags: --s3-endpoint %s --s3-bucket %s --s3-region %s\n", s.Endpoint, s.Bucket, s.Region)
}
