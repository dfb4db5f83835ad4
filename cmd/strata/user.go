package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// strata user: SCRAM users over the Kafka APIs of KIP-554
// (DescribeUserScramCredentials, AlterUserScramCredentials). The password
// is salted here, by kadm; only the salt and the salted password cross the
// wire, and the broker keeps the keys derived from them.
func newUserCmd(environ []string, stdout io.Writer) *cobra.Command {
	a := &admin{}
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Create, list and delete SCRAM users",
		Long:  "Manage the SCRAM users that SASL listeners authenticate, through the Kafka protocol, against any broker of the cluster.",
	}
	a.addFlags(cmd, environ)
	cmd.AddCommand(newUserCreateCmd(a, stdout), newUserListCmd(a, stdout), newUserDeleteCmd(a, stdout))
	asGroup(cmd)
	return cmd
}

// scramMechanisms are the mechanisms by their names.
var scramMechanisms = map[string]kadm.ScramMechanism{"SCRAM-SHA-256": kadm.ScramSha256, "SCRAM-SHA-512": kadm.ScramSha512}

func newUserCreateCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		password   string
		mechanisms []string
		iterations int32
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a SCRAM user, or set a user's password",
		Example: `  strata user create alice --password "$ALICE_PASSWORD"
  strata user create svc --password "$P" --mechanism SCRAM-SHA-256,SCRAM-SHA-512 --iterations 8192`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, names []string) error {
			usage := func(err error) error { return &usageError{err: err, cmd: cmd.CommandPath()} }
			if password == "" {
				return usage(errors.New("--password is required"))
			}
			if iterations < 4096 || iterations > 16384 {
				return usage(fmt.Errorf("--iterations %d: must be from 4096 to 16384", iterations))
			}
			var ups []kadm.UpsertSCRAM
			for _, m := range mechanisms {
				mech, ok := scramMechanisms[strings.ToUpper(strings.TrimSpace(m))]
				if !ok {
					return usage(fmt.Errorf("--mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", m))
				}
				ups = append(ups, kadm.UpsertSCRAM{User: names[0], Mechanism: mech, Iterations: iterations, Password: password})
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				rs, err := adm.AlterUserSCRAMs(ctx, nil, ups)
				if err != nil {
					return fmt.Errorf("user create: %w", err)
				}
				return eachName("user create", names, rs,
					func(r kadm.AlteredUserSCRAM) error { return kafkaError(r.Err, r.ErrMessage) },
					func(u string, _ kadm.AlteredUserSCRAM) {
						fmt.Fprintf(stdout, "created user %s (%s)\n", u, strings.Join(mechanisms, ", "))
					})
			})
		},
	}
	cmd.Flags().StringVar(&password, "password", "", "the user's password")
	cmd.Flags().StringSliceVar(&mechanisms, "mechanism", []string{"SCRAM-SHA-512"}, "SCRAM mechanisms to create the user for")
	cmd.Flags().Int32Var(&iterations, "iterations", 8192, "PBKDF2 iterations, 4096 to 16384")
	return cmd
}

type userRow struct {
	User       string          `json:"user"`
	Mechanisms []userMechanism `json:"mechanisms"`
}

type userMechanism struct {
	Mechanism  string `json:"mechanism"`
	Iterations int32  `json:"iterations"`
}

func newUserListCmd(a *admin, stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list [NAME...]",
		Aliases: []string{"ls"},
		Short:   "List SCRAM users and their mechanisms",
		Args:    args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, names []string) error {
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				ds, err := adm.DescribeUserSCRAMs(ctx, names...)
				if err != nil {
					return fmt.Errorf("user list: %w", err)
				}
				rows := []userRow{}
				fails := failures{verb: "user list"}
				for _, d := range ds.Sorted() {
					if d.Err != nil {
						fails.add(d.User, kafkaError(d.Err, d.ErrMessage))
						continue
					}
					row := userRow{User: d.User}
					for _, ci := range d.CredInfos {
						row.Mechanisms = append(row.Mechanisms, userMechanism{Mechanism: ci.Mechanism.String(), Iterations: ci.Iterations})
					}
					rows = append(rows, row)
				}
				if asJSON {
					if err := writeJSON(stdout, rows); err != nil {
						return err
					}
					return fails.err()
				}
				tw := newTable(stdout)
				fmt.Fprintln(tw, "USER\tMECHANISMS")
				for _, r := range rows {
					var ms []string
					for _, m := range r.Mechanisms {
						ms = append(ms, fmt.Sprintf("%s (%d iterations)", m.Mechanism, m.Iterations))
					}
					fmt.Fprintf(tw, "%s\t%s\n", r.User, strings.Join(ms, ", "))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				return fails.err()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func newUserDeleteCmd(a *admin, stdout io.Writer) *cobra.Command {
	var mechanisms []string
	cmd := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete SCRAM users (every mechanism, or those given)",
		Args:  args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, names []string) error {
			for _, m := range mechanisms {
				if _, ok := scramMechanisms[strings.ToUpper(strings.TrimSpace(m))]; !ok {
					return &usageError{err: fmt.Errorf("--mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", m), cmd: cmd.CommandPath()}
				}
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				// Without --mechanism, what each user has: deleting a
				// mechanism a user lacks fails the whole user.
				ds, err := adm.DescribeUserSCRAMs(ctx, names...)
				if err != nil {
					return fmt.Errorf("user delete: %w", err)
				}
				fails := failures{verb: "user delete"}
				var dels []kadm.DeleteSCRAM
				var todo []string
				for _, u := range names {
					d, ok := ds[u]
					switch {
					case !ok:
						fails.add(u, errors.New("missing from the broker's response"))
						continue
					case errors.Is(d.Err, kerr.ResourceNotFound):
						fails.add(u, errors.New("no such user"))
						continue
					case d.Err != nil:
						fails.add(u, kafkaError(d.Err, d.ErrMessage))
						continue
					}
					todo = append(todo, u)
					if len(mechanisms) > 0 {
						for _, m := range mechanisms {
							dels = append(dels, kadm.DeleteSCRAM{User: u, Mechanism: scramMechanisms[strings.ToUpper(strings.TrimSpace(m))]})
						}
						continue
					}
					for _, ci := range d.CredInfos {
						dels = append(dels, kadm.DeleteSCRAM{User: u, Mechanism: ci.Mechanism})
					}
				}
				if len(dels) > 0 {
					rs, err := adm.AlterUserSCRAMs(ctx, dels, nil)
					if err != nil {
						return fmt.Errorf("user delete: %w", err)
					}
					for _, u := range todo {
						r, ok := rs[u]
						switch {
						case !ok:
							fails.add(u, errors.New("missing from the broker's response"))
						case r.Err != nil:
							fails.add(u, kafkaError(r.Err, r.ErrMessage))
						default:
							fmt.Fprintf(stdout, "deleted user %s\n", u)
						}
					}
				}
				return fails.err()
			})
		},
	}
	cmd.Flags().StringSliceVar(&mechanisms, "mechanism", nil, "delete only these mechanisms' credentials")
	return cmd
}
