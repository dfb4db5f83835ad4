package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

// The quota verbs are kafka-configs.sh --entity-type users/clients over
// KIP-546's AlterClientQuotas and DescribeClientQuotas, against any broker
// of the cluster (a broker passes the change on to the controller).

func newQuotaCmd(environ []string, stdout io.Writer) *cobra.Command {
	a := &admin{}
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Set and list client quotas (byte rates and request time per user and client id)",
		Long: `Client quotas limit what a user, a client id, or a user's client id may use
of the brokers: produce bytes per second, fetch bytes per second, and the
percentage of a request handler's time. Each broker holds every client to
them on its own: a client over its quota is told to wait (throttle_time_ms)
and its connection reads nothing more until it has. Quotas are set on named
entities or on the defaults (--default-user, --default-client-id), and the
most specific one that exists applies, in Kafka's order: user and client id,
user and default client id, user, default user and client id, default user
and default client id, default user, client id, default client id.`,
	}
	a.addFlags(cmd, environ)
	cmd.AddCommand(newQuotaSetCmd(a, stdout), newQuotaListCmd(a, stdout))
	asGroup(cmd)
	return cmd
}

// quotaKeyOrder is the order quota keys are shown in.
var quotaKeyOrder = []string{"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}

// entityFlags are the flags that name a quota entity.
type entityFlags struct {
	user, clientID               string
	defaultUser, defaultClientID bool
}

func (e *entityFlags) add(cmd *cobra.Command, verb string) {
	f := cmd.Flags()
	f.StringVar(&e.user, "user", "", "the user ("+verb+"), as its principal's name: alice for User:alice")
	f.StringVar(&e.clientID, "client-id", "", "the client id ("+verb+")")
	f.BoolVar(&e.defaultUser, "default-user", false, "the default user: every user without a quota of its own")
	f.BoolVar(&e.defaultClientID, "default-client-id", false, "the default client id: every client id without a quota of its own")
}

// check refuses a named and a default component of the same type.
func (e *entityFlags) check(cmd *cobra.Command) error {
	for _, p := range [][2]string{{"user", "default-user"}, {"client-id", "default-client-id"}} {
		if cmd.Flags().Changed(p[0]) && cmd.Flags().Changed(p[1]) {
			return &usageError{err: fmt.Errorf("--%s and --%s name the same component: give one", p[0], p[1]), cmd: cmd.CommandPath()}
		}
	}
	return nil
}

// components returns the entity the flags name, as kadm spells it: a
// default is a nil name.
func (e *entityFlags) components(cmd *cobra.Command) kadm.ClientQuotaEntity {
	var out kadm.ClientQuotaEntity
	if cmd.Flags().Changed("user") || e.defaultUser {
		c := kadm.ClientQuotaEntityComponent{Type: "user"}
		if !e.defaultUser {
			c.Name = &e.user
		}
		out = append(out, c)
	}
	if cmd.Flags().Changed("client-id") || e.defaultClientID {
		c := kadm.ClientQuotaEntityComponent{Type: "client-id"}
		if !e.defaultClientID {
			c.Name = &e.clientID
		}
		out = append(out, c)
	}
	return out
}

func newQuotaSetCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		entity       entityFlags
		producer     int64
		consumer     int64
		percentage   float64
		mutations    float64
		remove       []string
		validateOnly bool
	)
	cmd := &cobra.Command{
		Use:   "set (--user U | --default-user) and/or (--client-id C | --default-client-id) QUOTAS",
		Short: "Set or remove the quotas of a user, a client id, or both",
		Example: `  strata quota set --client-id ingest --producer-byte-rate 5000000
  strata quota set --user alice --consumer-byte-rate 10485760 --request-percentage 50
  strata quota set --default-user --producer-byte-rate 1048576
  strata quota set --user alice --remove request-percentage`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			usage := func(err error) error { return &usageError{err: err, cmd: cmd.CommandPath()} }
			if err := entity.check(cmd); err != nil {
				return err
			}
			e := entity.components(cmd)
			if len(e) == 0 {
				return usage(errors.New("name the entity: --user, --default-user, --client-id and/or --default-client-id"))
			}
			var ops []kadm.AlterClientQuotaOp
			for _, s := range []struct {
				flag, key string
				value     float64
			}{
				{"producer-byte-rate", "producer_byte_rate", float64(producer)},
				{"consumer-byte-rate", "consumer_byte_rate", float64(consumer)},
				{"request-percentage", "request_percentage", percentage},
				{"controller-mutation-rate", "controller_mutation_rate", mutations},
			} {
				if !cmd.Flags().Changed(s.flag) {
					continue
				}
				if s.value <= 0 {
					return usage(fmt.Errorf("--%s %v: must be greater than 0 (use --remove %s to lift it)", s.flag, s.value, s.flag))
				}
				ops = append(ops, kadm.AlterClientQuotaOp{Key: s.key, Value: s.value})
			}
			for _, r := range remove {
				for _, k := range strings.Split(r, ",") {
					key := strings.ReplaceAll(strings.TrimSpace(k), "-", "_")
					if !slices.Contains(quotaKeyOrder, key) {
						return usage(fmt.Errorf("--remove %q: want one of %s", k, strings.Join(quotaKeyOrder, ", ")))
					}
					if slices.ContainsFunc(ops, func(op kadm.AlterClientQuotaOp) bool { return op.Key == key }) {
						return usage(fmt.Errorf("%s is both set and removed", key))
					}
					ops = append(ops, kadm.AlterClientQuotaOp{Key: key, Remove: true})
				}
			}
			if len(ops) == 0 {
				return usage(errors.New("nothing to change: give --producer-byte-rate, --consumer-byte-rate, --request-percentage or --remove"))
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				alter := adm.AlterClientQuotas
				if validateOnly {
					alter = adm.ValidateAlterClientQuotas
				}
				res, err := alter(ctx, []kadm.AlterClientQuotaEntry{{Entity: e, Ops: ops}})
				if err != nil {
					return fmt.Errorf("quota set %s: %w", entityString(e), err)
				}
				for _, r := range res {
					if r.Err != nil {
						msg := r.Err.Error()
						if r.ErrMessage != "" {
							msg += ": " + r.ErrMessage
						}
						return fmt.Errorf("quota set %s: %s", entityString(e), msg)
					}
				}
				verb := "set"
				if validateOnly {
					verb = "valid"
				}
				var changes []string
				for _, op := range ops {
					if op.Remove {
						changes = append(changes, "removed "+op.Key)
					} else {
						changes = append(changes, op.Key+"="+formatQuota(op.Key, op.Value))
					}
				}
				fmt.Fprintf(stdout, "%s %s: %s\n", verb, entityString(e), strings.Join(changes, ", "))
				return nil
			})
		},
	}
	entity.add(cmd, "whose quotas to set")
	f := cmd.Flags()
	f.Int64Var(&producer, "producer-byte-rate", 0, "bytes per second the entity may produce")
	f.Int64Var(&consumer, "consumer-byte-rate", 0, "bytes per second the entity may fetch")
	f.Float64Var(&percentage, "request-percentage", 0, "percentage of one request handler's time the entity may use (100 = a whole handler)")
	f.Float64Var(&mutations, "controller-mutation-rate", 0, "topic and partition creations and deletions per second (stored, not enforced)")
	f.StringSliceVar(&remove, "remove", nil, "quota keys to remove (producer-byte-rate, consumer-byte-rate, request-percentage, controller-mutation-rate); repeatable")
	f.BoolVar(&validateOnly, "validate-only", false, "check the change without making it")
	return cmd
}

// quotaRow is one entity's quotas as list prints them.
type quotaRow struct {
	User     *string            `json:"user,omitempty"`      // "<default>" for the default user
	ClientID *string            `json:"client_id,omitempty"` // "<default>" for the default client id
	Quotas   map[string]float64 `json:"quotas"`
}

func newQuotaListCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		entity entityFlags
		strict bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List client quotas, all or those of a user and/or client id",
		Example: `  strata quota list
  strata quota list --user alice            # alice's, with any client id
  strata quota list --user alice --strict   # alice's own only
  strata quota list --default-client-id`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := entity.check(cmd); err != nil {
				return err
			}
			var filter []kadm.DescribeClientQuotaComponent
			for _, c := range entity.components(cmd) {
				dc := kadm.DescribeClientQuotaComponent{Type: c.Type, MatchName: c.Name, MatchType: 0}
				if c.Name == nil {
					dc.MatchType = 1
				}
				filter = append(filter, dc)
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				qs, err := adm.DescribeClientQuotas(ctx, strict, filter)
				if err != nil {
					return fmt.Errorf("quota list: %w", err)
				}
				rows := []quotaRow{}
				keys := map[string]bool{}
				for _, q := range qs {
					r := quotaRow{Quotas: map[string]float64{}}
					for _, c := range q.Entity {
						name := "<default>"
						if c.Name != nil {
							name = *c.Name
						}
						switch c.Type {
						case "user":
							r.User = &name
						case "client-id":
							r.ClientID = &name
						}
					}
					for _, v := range q.Values {
						r.Quotas[v.Key] = v.Value
						keys[v.Key] = true
					}
					rows = append(rows, r)
				}
				if asJSON {
					return writeJSON(stdout, rows)
				}
				// A column for each key that some entity has, in a fixed
				// order, then any key this version does not know.
				var cols []string
				for _, k := range quotaKeyOrder {
					if keys[k] {
						cols = append(cols, k)
						delete(keys, k)
					}
				}
				for k := range keys {
					cols = append(cols, k)
				}
				slices.Sort(cols[len(cols)-len(keys):])
				tw := newTable(stdout)
				fmt.Fprint(tw, "USER\tCLIENT-ID")
				for _, c := range cols {
					fmt.Fprint(tw, "\t"+strings.ToUpper(c))
				}
				fmt.Fprintln(tw)
				for _, r := range rows {
					fmt.Fprintf(tw, "%s\t%s", entityName(r.User), entityName(r.ClientID))
					for _, c := range cols {
						v, ok := r.Quotas[c]
						s := "-"
						if ok {
							s = formatQuota(c, v)
						}
						fmt.Fprint(tw, "\t"+s)
					}
					fmt.Fprintln(tw)
				}
				return tw.Flush()
			})
		},
	}
	entity.add(cmd, "whose quotas to list")
	cmd.Flags().BoolVar(&strict, "strict", false, "only entities made of exactly the named components (--user alice: not alice's client ids)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// entityString names an entity as Kafka's tools do: user=alice,client-id=<default>.
func entityString(e kadm.ClientQuotaEntity) string {
	var parts []string
	for _, c := range e {
		name := "<default>"
		if c.Name != nil {
			name = *c.Name
		}
		parts = append(parts, c.Type+"="+name)
	}
	return strings.Join(parts, ",")
}

// formatQuota prints byte rates as whole numbers and the rest as they are.
func formatQuota(key string, v float64) string {
	if strings.HasSuffix(key, "_byte_rate") {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// entityName is a component of a listed entity, "-" when the entity has
// no such component.
func entityName(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
