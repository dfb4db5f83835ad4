package main

import (
	"github.com/spf13/cobra"

	"strata/cmd/internal/config"
	"strata/loadtest"
)

// newLoadtestCmd mounts the load generator with this binary's conventions:
// --bootstrap defaults to STRATA_BOOTSTRAP as in every admin verb, and
// bad flag values are usage errors through the root's flag error function.
func newLoadtestCmd(environ []string) *cobra.Command {
	bootstrap, _ := lookupEnv(environ, config.EnvBootstrap)
	return mount(loadtest.Command(loadtest.Options{Bootstrap: bootstrap, BootstrapEnv: config.EnvBootstrap}))
}
