package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// strata acl: ACLs over the Kafka APIs of KIP-140 (CreateAcls,
// DescribeAcls, DeleteAcls), in Kafka's vocabulary: principals as
// Type:name, operations as kafka-acls names them.
func newACLCmd(environ []string, stdout io.Writer) *cobra.Command {
	a := &admin{}
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Add, list and delete ACLs",
		Long: `Manage the access control lists the brokers authorize requests with
(nodes run with --super-users or --authorizer), through the Kafka protocol,
against any broker of the cluster. Operations are Kafka's: READ, WRITE,
CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
ALTER_CONFIGS, IDEMPOTENT_WRITE, ALL.`,
	}
	a.addFlags(cmd, environ)
	cmd.AddCommand(newACLAddCmd(a, stdout), newACLListCmd(a, stdout), newACLDeleteCmd(a, stdout))
	asGroup(cmd)
	return cmd
}

// aclOperationNames are the operations an ACL may name, in Kafka's order.
var aclOperationNames = "READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALL"

// aclFlags are the flags that name ACLs: a resource, its pattern, a
// principal with its permission, a host and operations. add takes them as
// the ACL to create, list and delete as a filter.
type aclFlags struct {
	allow, deny, principal string
	ops                    []string
	topic, group, txnID    string
	cluster                bool
	prefixed               bool
	pattern                string
	host                   string
}

func (f *aclFlags) register(cmd *cobra.Command, filter bool) {
	fl := cmd.Flags()
	what := "the ACL's"
	if filter {
		what = "only ACLs of this"
	}
	fl.StringVar(&f.allow, "allow", "", "allow this principal (Type:name, e.g. User:alice); "+what+" principal, allowing")
	fl.StringVar(&f.deny, "deny", "", "deny this principal (Type:name); "+what+" principal, denying")
	fl.StringSliceVar(&f.ops, "operation", nil, "operations, comma-separated: "+aclOperationNames)
	fl.StringVar(&f.topic, "topic", "", "a topic (or topic prefix with --prefixed)")
	fl.StringVar(&f.group, "group", "", "a consumer group (or prefix with --prefixed)")
	fl.StringVar(&f.txnID, "transactional-id", "", "a transactional id (or prefix with --prefixed)")
	fl.BoolVar(&f.cluster, "cluster", false, "the cluster")
	fl.BoolVar(&f.prefixed, "prefixed", false, "the resource name is a prefix (PREFIXED pattern) rather than a name (LITERAL)")
	fl.StringVar(&f.host, "host", "", "client address the ACL applies to (default: every host, *)")
	if filter {
		fl.StringVar(&f.principal, "principal", "", "only ACLs of this principal, allowing or denying")
		fl.StringVar(&f.pattern, "pattern", "", "pattern filter: literal, prefixed, match (every ACL that applies to the named resource) or any (the default)")
	}
}

func usageErr(cmd *cobra.Command, format string, a ...any) error {
	return &usageError{err: fmt.Errorf(format, a...), cmd: cmd.CommandPath()}
}

func validPrincipal(p string) bool {
	typ, name, ok := strings.Cut(p, ":")
	return ok && typ != "" && name != ""
}

// resource applies the resource flags to b and reports whether one was
// given; more than one is an error.
func (f *aclFlags) resource(cmd *cobra.Command, b *kadm.ACLBuilder) (bool, error) {
	n := 0
	for _, set := range []bool{f.topic != "", f.group != "", f.txnID != "", f.cluster} {
		if set {
			n++
		}
	}
	if n > 1 {
		return false, usageErr(cmd, "name one resource: --topic, --group, --transactional-id or --cluster")
	}
	switch {
	case f.topic != "":
		b.Topics(f.topic)
	case f.group != "":
		b.Groups(f.group)
	case f.txnID != "":
		b.TransactionalIDs(f.txnID)
	case f.cluster:
		b.Clusters()
	}
	return n == 1, nil
}

// operations parses --operation; any allows ANY (filters).
func (f *aclFlags) operations(cmd *cobra.Command, any bool) ([]kadm.ACLOperation, error) {
	var ops []kadm.ACLOperation
	for _, s := range f.ops {
		op, err := kmsg.ParseACLOperation(strings.TrimSpace(s))
		if err != nil || op == kmsg.ACLOperationUnknown || op == kmsg.ACLOperationAny && !any ||
			op == kmsg.ACLOperationCreateTokens || op == kmsg.ACLOperationDescribeTokens {
			return nil, usageErr(cmd, "--operation %q: want one of %s", s, aclOperationNames)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

func newACLAddCmd(a *admin, stdout io.Writer) *cobra.Command {
	f := &aclFlags{}
	cmd := &cobra.Command{
		Use:   "add (--allow|--deny) PRINCIPAL --operation OP (--topic T | --group G | --cluster | --transactional-id X) [--prefixed] [--host H]",
		Short: "Add an ACL",
		Example: `  strata acl add --allow User:alice --operation READ,DESCRIBE --topic orders
  strata acl add --allow User:etl --operation WRITE --topic events- --prefixed
  strata acl add --deny User:mallory --operation ALL --topic payments --host 10.0.0.7
  strata acl add --allow User:app --operation READ --group app-
  strata acl add --allow User:ops --operation ALTER --cluster`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (f.allow == "") == (f.deny == "") {
				return usageErr(cmd, "give one of --allow PRINCIPAL or --deny PRINCIPAL")
			}
			principal := f.allow + f.deny
			if !validPrincipal(principal) {
				return usageErr(cmd, "principal %q: want Type:name, e.g. User:alice", principal)
			}
			if len(f.ops) == 0 {
				return usageErr(cmd, "--operation is required: %s", aclOperationNames)
			}
			ops, err := f.operations(cmd, false)
			if err != nil {
				return err
			}
			pattern := kadm.ACLPatternLiteral
			if f.prefixed {
				pattern = kadm.ACLPatternPrefixed
			}
			b := kadm.NewACLs().ResourcePatternType(pattern).Operations(ops...)
			if ok, err := f.resource(cmd, b); err != nil {
				return err
			} else if !ok {
				return usageErr(cmd, "name the resource: --topic, --group, --transactional-id or --cluster")
			}
			if f.cluster && f.prefixed {
				return usageErr(cmd, "--prefixed does not go with --cluster")
			}
			host := f.host
			if host == "" {
				host = "*"
			}
			if f.allow != "" {
				b.Allow(principal).AllowHosts(host)
			} else {
				b.Deny(principal).DenyHosts(host)
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				rs, err := adm.CreateACLs(ctx, b)
				if err != nil {
					return fmt.Errorf("acl add: %w", err)
				}
				fails := failures{verb: "acl add"}
				for _, r := range rs {
					if r.Err != nil {
						fails.add(r.Operation.String(), kafkaError(r.Err, r.ErrMessage))
						continue
					}
					fmt.Fprintf(stdout, "added %s %s %s on %s from %s\n", r.Permission, r.Principal, r.Operation, resourceString(r.Type, r.Pattern, r.Name), r.Host)
				}
				return fails.err()
			})
		},
	}
	f.register(cmd, false)
	return cmd
}

// resourceString is TYPE:PATTERN:name, as Kafka's tools print a resource.
func resourceString(t kmsg.ACLResourceType, p kadm.ACLPattern, name string) string {
	return fmt.Sprintf("%s:%s:%s", t, p, name)
}

// filter builds the filter of list and delete from the flags; unset
// fields match anything.
func (f *aclFlags) filter(cmd *cobra.Command) (*kadm.ACLBuilder, bool, error) {
	b := kadm.NewACLs()
	named, err := f.resource(cmd, b)
	if err != nil {
		return nil, false, err
	}
	if !named {
		b.AnyResource()
	}
	pattern := kadm.ACLPatternAny
	switch p := strings.ToLower(f.pattern); {
	case f.prefixed && p != "" && p != "prefixed":
		return nil, false, usageErr(cmd, "--prefixed and --pattern %s disagree", f.pattern)
	case f.prefixed || p == "prefixed":
		pattern = kadm.ACLPatternPrefixed
	case p == "literal":
		pattern = kadm.ACLPatternLiteral
	case p == "match":
		pattern = kadm.ACLPatternMatch
	case p == "any" || p == "":
	default:
		return nil, false, usageErr(cmd, "--pattern %q: want literal, prefixed, match or any", f.pattern)
	}
	b.ResourcePatternType(pattern)
	ops, err := f.operations(cmd, true)
	if err != nil {
		return nil, false, err
	}
	if len(ops) == 0 {
		ops = []kadm.ACLOperation{kadm.OpAny}
	}
	b.Operations(ops...)
	var hosts []string
	if f.host != "" {
		hosts = []string{f.host}
	}
	n := 0
	for _, p := range []string{f.allow, f.deny, f.principal} {
		if p != "" {
			n++
			if !validPrincipal(p) {
				return nil, false, usageErr(cmd, "principal %q: want Type:name, e.g. User:alice", p)
			}
		}
	}
	if n > 1 {
		return nil, false, usageErr(cmd, "give at most one of --principal, --allow and --deny")
	}
	switch {
	case f.allow != "":
		b.Allow(f.allow).AllowHosts(hosts...)
	case f.deny != "":
		b.Deny(f.deny).DenyHosts(hosts...)
	case f.principal != "":
		b.Allow(f.principal).AllowHosts(hosts...).Deny(f.principal).DenyHosts(hosts...)
	default:
		b.Allow().AllowHosts(hosts...).Deny().DenyHosts(hosts...)
	}
	return b, named || n > 0, nil
}

// aclRow is one ACL as list and delete print it.
type aclRow struct {
	Principal    string `json:"principal"`
	Host         string `json:"host"`
	Operation    string `json:"operation"`
	Permission   string `json:"permission"`
	ResourceType string `json:"resource_type"`
	Pattern      string `json:"pattern"`
	Resource     string `json:"resource"`
}

func printACLs(stdout io.Writer, rows []aclRow, asJSON bool) error {
	slices.SortFunc(rows, func(a, b aclRow) int {
		return strings.Compare(a.ResourceType+"\x00"+a.Resource+"\x00"+a.Pattern+"\x00"+a.Principal+"\x00"+a.Operation+"\x00"+a.Permission,
			b.ResourceType+"\x00"+b.Resource+"\x00"+b.Pattern+"\x00"+b.Principal+"\x00"+b.Operation+"\x00"+b.Permission)
	})
	rows = slices.Compact(rows)
	if asJSON {
		if rows == nil {
			rows = []aclRow{}
		}
		return writeJSON(stdout, rows)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "PRINCIPAL\tHOST\tOPERATION\tPERMISSION\tRESOURCE TYPE\tPATTERN\tRESOURCE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Principal, r.Host, r.Operation, r.Permission, r.ResourceType, r.Pattern, r.Resource)
	}
	return tw.Flush()
}

func newACLListCmd(a *admin, stdout io.Writer) *cobra.Command {
	f := &aclFlags{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list [filters]",
		Aliases: []string{"ls"},
		Short:   "List ACLs, all of them or those the filters select",
		Example: `  strata acl list
  strata acl list --topic orders --pattern match
  strata acl list --principal User:alice --json`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, _, err := f.filter(cmd)
			if err != nil {
				return err
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				rs, err := adm.DescribeACLs(ctx, b)
				if err != nil {
					return fmt.Errorf("acl list: %w", err)
				}
				var rows []aclRow
				for _, r := range rs {
					if r.Err != nil {
						return fmt.Errorf("acl list: %w", kafkaError(r.Err, r.ErrMessage))
					}
					for _, d := range r.Described {
						rows = append(rows, aclRow{d.Principal, d.Host, d.Operation.String(), d.Permission.String(), d.Type.String(), d.Pattern.String(), d.Name})
					}
				}
				return printACLs(stdout, rows, asJSON)
			})
		},
	}
	f.register(cmd, true)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func newACLDeleteCmd(a *admin, stdout io.Writer) *cobra.Command {
	f := &aclFlags{}
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "delete [filters]",
		Short: "Delete the ACLs the filters select",
		Example: `  strata acl delete --allow User:alice --topic orders --operation READ
  strata acl delete --principal User:mallory
  strata acl delete --all`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, narrowed, err := f.filter(cmd)
			if err != nil {
				return err
			}
			if !narrowed && !all {
				return usageErr(cmd, "name a resource or a principal, or give --all to delete every ACL")
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				rs, err := adm.DeleteACLs(ctx, b)
				if err != nil {
					return fmt.Errorf("acl delete: %w", err)
				}
				var rows []aclRow
				var errs []error
				for _, r := range rs {
					if r.Err != nil {
						errs = append(errs, kafkaError(r.Err, r.ErrMessage))
						continue
					}
					for _, d := range r.Deleted {
						if d.Err != nil {
							errs = append(errs, kafkaError(d.Err, d.ErrMessage))
							continue
						}
						rows = append(rows, aclRow{d.Principal, d.Host, d.Operation.String(), d.Permission.String(), d.Type.String(), d.Pattern.String(), d.Name})
					}
				}
				if err := errors.Join(errs...); err != nil {
					return fmt.Errorf("acl delete: %w", err)
				}
				if !asJSON {
					fmt.Fprintf(stdout, "deleted %d ACLs\n", len(rows))
					if len(rows) == 0 {
						return nil
					}
				}
				return printACLs(stdout, rows, asJSON)
			})
		},
	}
	f.register(cmd, true)
	cmd.Flags().BoolVar(&all, "all", false, "allow a delete with no resource or principal: every ACL the other filters select")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the deleted ACLs as JSON")
	return cmd
}
