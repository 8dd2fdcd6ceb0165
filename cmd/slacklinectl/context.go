package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/slackline/slackline/internal/atomicfile"
	"github.com/slackline/slackline/internal/auth"
)

// The CLI's contexts file, in the manner of a kubeconfig: named contexts,
// each a coordinator URL and the credentials to reach it, and the current
// one. `make run` writes the context "local" and makes it current.
const (
	// configEnv names the contexts file instead of the default
	// (os.UserConfigDir()/slackline/config.yaml).
	configEnv = "SLACKLINE_CONFIG"
	// contextEnv names the context to use instead of the file's current one.
	contextEnv = "SLACKLINE_CONTEXT"
	// maxConfigBytes bounds the contexts file read.
	maxConfigBytes = 1 << 20
)

// cliConfig is the contexts file.
type cliConfig struct {
	CurrentContext string       `json:"current-context,omitempty"`
	Contexts       []cliContext `json:"contexts,omitempty"`
}

// cliContext is one named cluster: where its coordinator is and what to
// trust and present there. Relative paths are relative to the file's
// directory.
type cliContext struct {
	Name        string `json:"name"`
	Coordinator string `json:"coordinator,omitempty"`
	CA          string `json:"ca,omitempty"`
	TokenFile   string `json:"token-file,omitempty"`
	CRL         string `json:"crl,omitempty"`
	// JobsServer is the job service's URL (slacklinectl jobs).
	JobsServer string `json:"jobs-server,omitempty"`
}

// configPath returns the contexts file's path.
func configPath() (string, error) {
	if p := os.Getenv(configEnv); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no contexts file: %w (set %s)", err, configEnv)
	}
	return filepath.Join(dir, "slackline", "config.yaml"), nil
}

// loadConfig reads the contexts file at path; a missing file is an empty
// configuration. Unknown keys are refused, naming the file.
func loadConfig(path string) (*cliConfig, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &cliConfig{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxConfigBytes)
	}
	var c cliConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, ctx := range c.Contexts {
		switch {
		case ctx.Name == "":
			return nil, fmt.Errorf("%s: contexts[%d].name: required", path, i)
		case seen[ctx.Name]:
			return nil, fmt.Errorf("%s: contexts[%d].name: %q given twice", path, i, ctx.Name)
		}
		seen[ctx.Name] = true
	}
	if c.CurrentContext != "" && !seen[c.CurrentContext] {
		return nil, fmt.Errorf("%s: current-context: no context %q", path, c.CurrentContext)
	}
	return &c, nil
}

// context returns the named context, or nil.
func (c *cliConfig) context(name string) *cliContext {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i]
		}
	}
	return nil
}

// save writes c to path atomically, readable by its owner only (it names
// credentials).
func (c *cliConfig) save(path string) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

// applyContext fills the connection settings that neither a flag nor an
// environment variable set from the chosen context (--context, else
// SLACKLINE_CONTEXT, else the file's current context), then from the
// defaults.
func (g *globals) applyContext(cmd *cobra.Command) error {
	flags := cmd.Flags()
	settings := []struct {
		flag, env string
		value     *string
		fromCtx   func(*cliContext) string
		file      bool
	}{
		{"coordinator", coordinatorEnv, &g.coordinator, func(c *cliContext) string { return c.Coordinator }, false},
		{"ca", auth.EnvCA, &g.creds.CAFile, func(c *cliContext) string { return c.CA }, true},
		{"token-file", auth.EnvTokenFile, &g.creds.TokenFile, func(c *cliContext) string { return c.TokenFile }, true},
		{"crl", auth.EnvCRL, &g.creds.CRLFile, func(c *cliContext) string { return c.CRL }, true},
	}
	var missing []int
	for i, s := range settings {
		if flags.Changed(s.flag) {
			continue
		}
		if v := os.Getenv(s.env); v != "" {
			*s.value = v
			continue
		}
		missing = append(missing, i)
	}
	name := g.context
	if name == "" {
		name = os.Getenv(contextEnv)
	}
	if len(missing) > 0 || name != "" {
		path, err := configPath()
		if err != nil && name != "" {
			return err
		}
		cfg := &cliConfig{}
		if err == nil {
			if cfg, err = loadConfig(path); err != nil {
				return err
			}
		}
		if name == "" {
			name = cfg.CurrentContext
		}
		if name != "" {
			ctx := cfg.context(name)
			if ctx == nil {
				return fmt.Errorf("--context %q: no such context in %s (see slacklinectl config get-contexts)", name, path)
			}
			for _, i := range missing {
				s := settings[i]
				v := s.fromCtx(ctx)
				if s.file && v != "" && !filepath.IsAbs(v) {
					v = filepath.Join(filepath.Dir(path), v)
				}
				*s.value = v
			}
		}
	}
	if g.coordinator == "" {
		g.coordinator = defaultCoordinator
	}
	return nil
}

// newConfigCommand manages the contexts file.
func newConfigCommand(g *globals) *cobra.Command {
	config := &cobra.Command{
		Use:   "config",
		Short: "Manage the contexts file (" + configEnv + ", default ~/.config/slackline/config.yaml): coordinator URL and credentials per cluster",
		Args:  exactArgs(""),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	config.PersistentPreRunE = func(*cobra.Command, []string) error { return nil } // reads no context itself

	var use bool
	setContext := &cobra.Command{
		Use:   "set-context NAME [--coordinator URL] [--ca FILE] [--token-file FILE] [--crl FILE] [--use]",
		Short: "Create or update a context from the connection flags given, keeping its other settings",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, cfg, err := openConfig()
			if err != nil {
				return err
			}
			ctx := cfg.context(args[0])
			if ctx == nil {
				cfg.Contexts = append(cfg.Contexts, cliContext{Name: args[0]})
				ctx = &cfg.Contexts[len(cfg.Contexts)-1]
			}
			flags := cmd.Flags()
			for flag, set := range map[string]func(string){
				"coordinator": func(v string) { ctx.Coordinator = v },
				"ca":          func(v string) { ctx.CA = absPath(v) },
				"token-file":  func(v string) { ctx.TokenFile = absPath(v) },
				"crl":         func(v string) { ctx.CRL = absPath(v) },
				"jobs-server": func(v string) { ctx.JobsServer = v },
			} {
				if flags.Changed(flag) {
					v, _ := flags.GetString(flag)
					set(v)
				}
			}
			if use {
				cfg.CurrentContext = args[0]
			}
			if err := cfg.save(path); err != nil {
				return err
			}
			_, err = fmt.Fprintf(g.out, "context %q written to %s\n", args[0], path)
			return err
		},
	}
	setContext.Flags().BoolVar(&use, "use", false, "make it the current context")
	setContext.Flags().String("jobs-server", "", "the job service's URL (slacklinectl jobs)")

	useContext := &cobra.Command{
		Use:   "use-context NAME",
		Short: "Make a context the current one",
		Args:  exactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			path, cfg, err := openConfig()
			if err != nil {
				return err
			}
			if cfg.context(args[0]) == nil {
				return notFoundf("no context %q in %s", args[0], path)
			}
			cfg.CurrentContext = args[0]
			return cfg.save(path)
		},
	}

	getContexts := &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts; * marks the current one",
		Args:  exactArgs(""),
		RunE: func(*cobra.Command, []string) error {
			_, cfg, err := openConfig()
			if err != nil {
				return err
			}
			t := table{header: []string{"CURRENT", "NAME", "COORDINATOR", "CA", "TOKEN FILE"}}
			for _, c := range cfg.Contexts {
				current := ""
				if c.Name == cfg.CurrentContext {
					current = "*"
				}
				t.rows = append(t.rows, []string{current, c.Name, c.Coordinator, c.CA, c.TokenFile})
			}
			return g.printValue(cfg, t)
		},
	}

	currentContext := &cobra.Command{
		Use:   "current-context",
		Short: "Print the current context's name",
		Args:  exactArgs(""),
		RunE: func(*cobra.Command, []string) error {
			path, cfg, err := openConfig()
			if err != nil {
				return err
			}
			if cfg.CurrentContext == "" {
				return notFoundf("no current context in %s", path)
			}
			_, err = fmt.Fprintln(g.out, cfg.CurrentContext)
			return err
		},
	}
	config.AddCommand(setContext, useContext, getContexts, currentContext)
	return config
}

// openConfig loads the contexts file for the config commands.
func openConfig() (string, *cliConfig, error) {
	path, err := configPath()
	if err != nil {
		return "", nil, err
	}
	cfg, err := loadConfig(path)
	return path, cfg, err
}

// absPath makes a credentials path absolute, so that the context works
// from any directory.
func absPath(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// contextJobsServer is the job service's URL in the chosen context (as
// applyContext chooses it), or "" when there is none.
func (g *globals) contextJobsServer() string {
	path, err := configPath()
	if err != nil {
		return ""
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return ""
	}
	name := cmp.Or(g.context, os.Getenv(contextEnv), cfg.CurrentContext)
	if ctx := cfg.context(name); ctx != nil {
		return ctx.JobsServer
	}
	return ""
}
