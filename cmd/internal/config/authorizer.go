package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Authorizer configures ACL authorization. See broker.Config's
// Authorizer, SuperUsers and AllowEveryoneIfNoACLFound.
type Authorizer struct {
	Enabled bool // authorizer.enabled; also on when SuperUsers is set
	// SuperUsers is authorizer.super_users: principals in Kafka's
	// Type:name form that may do everything (super.users).
	SuperUsers                []string
	AllowEveryoneIfNoACLFound bool // authorizer.allow_everyone_if_no_acl_found
}

// authorizerSettings are the ACL settings, appended to the settings table
// by settings.go's init.
var authorizerSettings = []*setting{
	{
		key: "authorizer.enabled", flag: "authorizer", typ: "bool", usage: "check every request against the ACLs (Kafka's StandardAuthorizer); on when --super-users is set",
		set: boolSetter(func(c *Config) *bool { return &c.Authorizer.Enabled }),
		get: func(c *Config) string { return strconv.FormatBool(c.Authorizer.Enabled) },
	},
	{
		key: "authorizer.super_users", flag: "super-users", typ: "list", usage: "principals that may do everything, e.g. User:admin,User:ops (super.users); turns the authorizer on",
		set: func(c *Config, raw string) error {
			var us []string
			for u := range strings.SplitSeq(raw, ",") {
				if u = strings.TrimSpace(u); u == "" {
					continue
				}
				if typ, name, ok := strings.Cut(u, ":"); !ok || typ == "" || name == "" {
					return fmt.Errorf("%q: a principal is Type:name, e.g. User:admin", u)
				}
				us = append(us, u)
			}
			c.Authorizer.SuperUsers = us
			return nil
		},
		get: func(c *Config) string { return strings.Join(c.Authorizer.SuperUsers, ",") },
	},
	{
		key: "authorizer.allow_everyone_if_no_acl_found", flag: "allow-everyone-if-no-acl-found", typ: "bool", usage: "allow what no ACL on the resource speaks of (allow.everyone.if.no.acl.found)",
		set: boolSetter(func(c *Config) *bool { return &c.Authorizer.AllowEveryoneIfNoACLFound }),
		get: func(c *Config) string { return strconv.FormatBool(c.Authorizer.AllowEveryoneIfNoACLFound) },
	},
}
