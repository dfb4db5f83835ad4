package loadtest

import (
	"fmt"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
)

// kfakeCommand runs franz-go's in-memory fake broker, so that the same
// loadtest runs can be measured against it and against Strata on the same
// machine (docs/benchmarks.md). It is a reference point, not a broker to
// keep data in: everything lives in memory and goes when it stops.
func kfakeCommand() *cobra.Command {
	var port int
	c := &cobra.Command{
		Use:   "kfake",
		Short: "Run franz-go's in-memory fake broker as a reference for comparisons",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			opts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation()}
			if port != 0 {
				opts = append(opts, kfake.Ports(port))
			}
			c, err := kfake.NewCluster(opts...)
			if err != nil {
				return fmt.Errorf("start kfake on port %d: %w", port, err)
			}
			defer c.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "kfake: bootstrap %s\n", c.ListenAddrs()[0])
			<-ctx.Done()
			return nil
		},
	}
	c.Flags().IntVar(&port, "port", 0, "loopback port to listen on (0 picks one)")
	return c
}
