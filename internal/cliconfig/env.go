package cliconfig

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// SecretFlags are the flags naming secrets' files (keys, certificates,
// CAs, revocation lists, authorization files, tokens) that a daemon also
// takes from the environment: EnvName(flag), e.g. SLACKLINE_TLS_KEY for
// --tls-key, so that a container or a unit can hand over paths without
// writing them into a config file. Precedence: the command line, then the
// environment, then the --config file, then the default.
var SecretFlags = []string{
	"tls-cert", "tls-key", "client-ca", "client-crl", "authz",
	"agent-client-cert", "agent-client-key",
	"ca", "cert", "key", "token-file",
	"etcd-ca", "etcd-cert", "etcd-key",
}

// EnvName returns the environment variable of a flag: SLACKLINE_ and the
// flag's name in upper case with dashes as underscores.
func EnvName(flagName string) string {
	return "SLACKLINE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets each SecretFlags flag that fs has and the command line did
// not set from its environment variable, when that is set and not empty.
// The flag is then marked set, so that a config file does not override it.
func applyEnv(fs flagSet) error {
	for _, name := range SecretFlags {
		v := os.Getenv(EnvName(name))
		if v == "" || fs.onCommandLine(name) {
			continue
		}
		var err error
		switch f := fs.(type) {
		case goFlags:
			if f.fs.Lookup(name) == nil {
				continue
			}
			err = f.fs.Set(name, v)
		case pFlags:
			if f.fs.Lookup(name) == nil {
				continue
			}
			err = f.fs.Set(name, v)
		}
		if err != nil {
			return fmt.Errorf("%s=%q (--%s): %w", EnvName(name), v, name, err)
		}
	}
	return nil
}

// ApplyEnv applies SecretFlags' environment variables to a parsed flag
// set (Parse does it before the config file).
func ApplyEnv(fs *flag.FlagSet) error { return applyEnv(goFlags{fs}) }

// ApplyPFlagsEnv is ApplyEnv for a parsed pflag set; call it before
// ApplyPFlagsFile.
func ApplyPFlagsEnv(fs *pflag.FlagSet) error { return applyEnv(pFlags{fs}) }
