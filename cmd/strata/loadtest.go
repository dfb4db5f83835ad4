package main

import (
	"github.com/spf13/cobra"

	"strata/cmd/internal/config"
	"strata/loadtest"
)

// newLoadtestCmd mounts the load generator with this binary's conventions:
// --bootstrap defaults to STRATA_BOOTSTRAP as in every admin verb, and
// bad flag values are usage errors through the root's flag error function;
// --tls and --sasl-* flags reach a secured listener as in every client verb.
func newLoadtestCmd(environ []string) *cobra.Command {
	bootstrap, _ := lookupEnv(environ, config.EnvBootstrap)
	var sec clientSecurity
	cmd := loadtest.Command(loadtest.Options{Bootstrap: bootstrap, BootstrapEnv: config.EnvBootstrap, ClientOpts: sec.opts})
	sec.addFlags(cmd.PersistentFlags(), environ)
	return mount(cmd)
}
