package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/runmesh/runmesh/internal/devenv"
)

// globalFlags are the flags every command takes.
type globalFlags struct {
	config, context, envFile  string
	server, caFile, tokenFile string
	output                    string
	timeout                   time.Duration
}

func (f *globalFlags) register(root *cobra.Command) {
	p := root.PersistentFlags()
	p.StringVar(&f.config, "config", "", "the config file with the contexts (default $XDG_CONFIG_HOME/runmesh/config.yaml)")
	p.StringVar(&f.context, "context", "", "the context to use (default: the config's current context)")
	p.StringVar(&f.envFile, "env-file", "", "read RUNMESH_ADMIN_URL and RUNMESH_ADMIN_TOKEN from this file (e.g. dev.env)")
	p.StringVar(&f.server, "server", "", "the admin API's URL, e.g. https://cp.example.com:8444")
	p.StringVar(&f.caFile, "ca-file", "", "PEM CA certificates to verify the admin API with (a private CA)")
	p.StringVar(&f.tokenFile, "token-file", "", "a file holding the admin token, readable by its owner only")
	p.StringVarP(&f.output, "output", "o", "table", "table, json or yaml")
	p.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long one request may take")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
}

func (f *globalFlags) check() error {
	if !slices.Contains([]string{"table", "json", "yaml"}, f.output) {
		return fmt.Errorf("--output: table, json or yaml, not %q", f.output)
	}
	return nil
}

// configFile is the CLI's config: named contexts, like kubectl's and gh's.
// It holds no token, only where each context's token file is.
type configFile struct {
	CurrentContext string        `yaml:"current-context,omitempty"`
	Contexts       []contextSpec `yaml:"contexts"`
}

// contextSpec is one named admin API.
type contextSpec struct {
	Name      string `yaml:"name"`
	Server    string `yaml:"server"`
	CAFile    string `yaml:"ca-file,omitempty"`
	TokenFile string `yaml:"token-file,omitempty"`
}

func (f *globalFlags) configPath(getenv func(string) string) string {
	if f.config != "" {
		return f.config
	}
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" {
		dir = filepath.Join(getenv("HOME"), ".config")
	}
	return filepath.Join(dir, "runmesh", "config.yaml")
}

func loadConfig(path string) (configFile, error) {
	var c configFile
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func saveConfig(path string, c configFile) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writePrivate(path, b)
}

// writePrivate writes a file only its owner can read, replacing any other.
func writePrivate(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".runmesh-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (c configFile) find(name string) (contextSpec, bool) {
	for _, x := range c.Contexts {
		if x.Name == name {
			return x, true
		}
	}
	return contextSpec{}, false
}

// endpoint is where to send requests and with what.
type endpoint struct {
	url, caFile, token string
}

// endpoint resolves the API and the token from one source, the first of:
// --context NAME; --env-file; RUNMESH_ADMIN_URL (with RUNMESH_ADMIN_TOKEN);
// the config's current context. --server, --ca-file and --token-file
// override what that source says.
func (a *app) endpoint() (endpoint, error) {
	f := &a.flags
	var e endpoint
	var tokenFile string
	switch {
	case f.context == "" && f.envFile != "":
		env, err := devenv.Read(f.envFile)
		if err != nil {
			return e, err
		}
		e.url, e.token = env["RUNMESH_ADMIN_URL"], env["RUNMESH_ADMIN_TOKEN"]
	case f.context == "" && a.getenv("RUNMESH_ADMIN_URL") != "":
		e.url, e.token = a.getenv("RUNMESH_ADMIN_URL"), a.getenv("RUNMESH_ADMIN_TOKEN")
	default:
		c, err := loadConfig(f.configPath(a.getenv))
		if err != nil {
			return e, err
		}
		name := cmp.Or(f.context, c.CurrentContext)
		if name != "" {
			spec, ok := c.find(name)
			if !ok {
				return e, fmt.Errorf("no context named %q (runmesh config get-contexts)", name)
			}
			e.url, e.caFile, tokenFile = spec.Server, spec.CAFile, spec.TokenFile
		}
	}
	e.url, e.caFile, tokenFile = cmp.Or(f.server, e.url), cmp.Or(f.caFile, e.caFile), cmp.Or(f.tokenFile, tokenFile)
	if f.tokenFile != "" || (e.token == "" && tokenFile != "") {
		t, err := readToken(tokenFile)
		if err != nil {
			return e, err
		}
		e.token = t
	}
	switch {
	case e.url == "":
		return e, errors.New("no admin API: use a context (runmesh config set-context), --server, --env-file or RUNMESH_ADMIN_URL")
	case e.token == "":
		return e, errors.New("no token: use a context with a token file, --token-file, --env-file or RUNMESH_ADMIN_TOKEN")
	}
	e.url = strings.TrimSuffix(e.url, "/")
	return e, nil
}

// readToken reads a token file, which must be readable by its owner only:
// a token others can read is as good as leaked.
func readToken(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is readable by others (mode %04o): chmod 600 it, and revoke the token if others could read it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// configCommand manages the contexts.
func (a *app) configCommand() *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Named contexts: which admin API, which CA, which token file"}
	c.AddCommand(a.setContextCommand(), a.useContextCommand(), a.getContextsCommand())
	return c
}

// setContextCommand adds or changes a context.
func (a *app) setContextCommand() *cobra.Command {
	var server, caFile, tokenFile string
	var tokenStdin bool
	set := &cobra.Command{
		Use:   "set-context NAME",
		Short: "Add or change a context; --token-stdin stores the token read from stdin in its token file (0600)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := a.flags.configPath(a.getenv)
			cfg, err := loadConfig(path)
			if err != nil {
				return err
			}
			spec, _ := cfg.find(args[0])
			spec.Name = args[0]
			if server != "" {
				spec.Server = server
			}
			if caFile != "" {
				spec.CAFile = caFile
			}
			if tokenFile != "" {
				spec.TokenFile = tokenFile
			}
			if tokenStdin {
				if spec.TokenFile == "" {
					spec.TokenFile = filepath.Join(filepath.Dir(path), args[0]+".token")
				}
				if err := storeToken(a.stdin, spec.TokenFile); err != nil {
					return err
				}
			}
			if spec.Server == "" {
				return errors.New("--server: a context needs the admin API's URL")
			}
			i := slices.IndexFunc(cfg.Contexts, func(x contextSpec) bool { return x.Name == spec.Name })
			if i < 0 {
				cfg.Contexts = append(cfg.Contexts, spec)
			} else {
				cfg.Contexts[i] = spec
			}
			if cfg.CurrentContext == "" {
				cfg.CurrentContext = spec.Name
			}
			if err := saveConfig(path, cfg); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "context %q saved in %s\n", spec.Name, path)
			return nil
		},
	}
	set.Flags().StringVar(&server, "server", "", "the admin API's URL")
	set.Flags().StringVar(&caFile, "ca-file", "", "PEM CA certificates for a private CA")
	set.Flags().StringVar(&tokenFile, "token-file", "", "where the context's token is (0600)")
	set.Flags().BoolVar(&tokenStdin, "token-stdin", false, "read the token from stdin and store it in the token file")
	return set
}

func (a *app) useContextCommand() *cobra.Command {
	return &cobra.Command{
		Use: "use-context NAME", Short: "Make a context the current one", Args: cobra.ExactArgs(1),
		ValidArgsFunction: a.contextNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			path := a.flags.configPath(a.getenv)
			cfg, err := loadConfig(path)
			if err != nil {
				return err
			}
			if _, ok := cfg.find(args[0]); !ok {
				return fmt.Errorf("no context named %q", args[0])
			}
			cfg.CurrentContext = args[0]
			return saveConfig(path, cfg)
		},
	}
}

func (a *app) getContextsCommand() *cobra.Command {
	return &cobra.Command{
		Use: "get-contexts", Short: "List the contexts; * marks the current one", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(a.flags.configPath(a.getenv))
			if err != nil {
				return err
			}
			rows := make([]any, 0, len(cfg.Contexts))
			for _, x := range cfg.Contexts {
				cur := ""
				if x.Name == cfg.CurrentContext {
					cur = "*"
				}
				rows = append(rows, map[string]any{"current": cur, "name": x.Name, "server": x.Server, "caFile": x.CAFile, "tokenFile": x.TokenFile})
			}
			return a.print(map[string]any{"contexts": rows}, view{list: "contexts", cols: cols("CURRENT=current", "NAME=name", "SERVER=server", "CA FILE=caFile", "TOKEN FILE=tokenFile")})
		},
	}
}

func (a *app) contextNames(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	cfg, _ := loadConfig(a.flags.configPath(a.getenv))
	var out []string
	for _, x := range cfg.Contexts {
		out = append(out, x.Name)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// storeToken writes the token read from in to path, readable by its
// owner only.
func storeToken(in io.Reader, path string) error {
	b, err := io.ReadAll(io.LimitReader(in, 4096))
	if err != nil {
		return err
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return errors.New("--token-stdin: no token on stdin")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writePrivate(path, []byte(token+"\n"))
}
