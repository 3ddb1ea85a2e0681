package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Configuration. Every flag of every command takes its value, in this
// order of precedence, from
//
//  1. the command line;
//  2. the environment variable ONCEQ_<FLAG>: the flag's name in upper case
//     with '-' as '_' (ONCEQ_CHECKPOINT_DIR, ONCEQ_SASL_PASSWORD); an empty
//     variable counts as unset;
//  3. the config file named by --config or ONCEQ_CONFIG;
//  4. the flag's default.
//
// The values of the environment and the file go through the flag's own
// Value.Set, as the command line's do, so each is parsed and checked the
// same way wherever it came from, and a bad one is refused (exit 2) with
// the flag and the source: `ONCEQ_CONCURRENCY="abc": --concurrency wants
// a whole number: ...`, `onceq.toml line 4: [worker] concurrency = "abc":
// ...`. A flag set from the environment or the file counts as given, as
// if it had been on the command line.
//
// The file is TOML. A config of flag values is flat: keys and values,
// grouped by command; TOML says exactly that ([worker] is a table of the
// worker's flags, [periodic.run] one of "onceq periodic run", a list is
// an array) with comments and without YAML's implicit typing (no, on and
// 0755 that are not strings) or indentation, and operators know it from
// Cargo, Hugo, Telegraf and systemd-like files. Plain "key = value" lines
// would need a format of our own for sections and lists. The parser,
// github.com/BurntSushi/toml, is a v1 module without dependencies of its
// own.
//
// The file's top-level keys are the global flags; a table per command
// holds its flags, its inherited ones included: a global flag in [worker]
// applies to onceq worker alone. A command reads its own table first,
// then, for a flag it inherits, its parents' tables, then the top level.
// A key that is no flag of its command, or a table that is no command, is
// refused with its name and line, whatever command runs, and so is a
// value that the flag does not parse: the whole file is checked every
// time.

// configFlag is the global flag naming the config file. A flag of that
// name elsewhere (onceq topics create's topic configs) shadows it on its
// command's command line; there the file comes from ONCEQ_CONFIG, and the
// flag itself from the command line or the file, never from ONCEQ_CONFIG.
const configFlag = "config"

// envPrefix starts the environment variable of every flag.
const envPrefix = "ONCEQ_"

// envName is the environment variable of the flag name: ONCEQ_CHECKPOINT_DIR
// for checkpoint-dir.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// origin says where a flag's value came from: source is flag, env, file or
// default; where is the variable or the file and line.
type origin struct {
	source string
	where  string
}

func (o origin) String() string {
	if o.where == "" {
		return o.source
	}
	return o.source + " " + o.where
}

// configurable reports whether the mechanism gives f a value: every flag
// but cobra's --help.
func configurable(f *pflag.Flag) bool { return f.Name != "help" }

// commandFlags returns every flag of cmd, its own and the inherited ones.
func commandFlags(cmd *cobra.Command) *pflag.FlagSet {
	cmd.InheritedFlags() // merges the parents' persistent flags into Flags()
	return cmd.Flags()
}

// configure runs before every command, once cobra parsed its command
// line: the flags the command line left unset take their values from the
// environment and the config file (a command that parses its own flags,
// config print, applies them itself), then the logger starts and warns of
// ONCEQ_ variables that name no flag.
func (g *globals) configure(cmd *cobra.Command) error {
	if !cmd.DisableFlagParsing {
		if _, err := applyConfig(cmd); err != nil {
			return err
		}
	}
	if err := g.setupLogger(); err != nil {
		return err
	}
	for _, v := range strayEnv(cmd.Root()) {
		attrs := []any{"variable", v[0]}
		if v[1] != "" {
			attrs = append(attrs, "did_you_mean", v[1])
		}
		g.log.Warn("an environment variable names no flag of any onceq command: ignored", attrs...)
	}
	return nil
}

// applyConfig gives each flag of cmd that the command line did not set its
// value from the environment or the config file, and returns where every
// flag's value came from, by flag name. The errors of all the flags come
// at once, one line each, as a usage error.
func applyConfig(cmd *cobra.Command) (map[string]origin, error) {
	fileFlag := cmd.Root().PersistentFlags().Lookup(configFlag)
	origins := map[string]origin{}
	switch v := os.Getenv(envName(configFlag)); {
	case fileFlag.Changed:
		origins[configFlag] = origin{source: "flag"}
	case v != "":
		_ = fileFlag.Value.Set(v) // a string
		origins[configFlag] = origin{"env", envName(configFlag)}
	default:
		origins[configFlag] = origin{source: "default"}
	}
	var cf *configFile
	if path := fileFlag.Value.String(); path != "" {
		var err error
		if cf, err = loadConfig(path); err != nil {
			return nil, err
		}
	}
	fl := commandFlags(cmd)
	var errs []string
	fl.VisitAll(func(f *pflag.Flag) {
		if !configurable(f) || f == fileFlag {
			return
		}
		if f.Changed {
			origins[f.Name] = origin{source: "flag"}
			return
		}
		if v := os.Getenv(envName(f.Name)); v != "" && f.Name != configFlag {
			src := fmt.Sprintf("%s=%s", envName(f.Name), strconv.Quote(masked(f.Name, v)))
			if err := setFlag(f, v); err != nil {
				errs = append(errs, badValue(src, f, err))
			}
			origins[f.Name] = origin{"env", envName(f.Name)}
			return
		}
		if fv, ok := cf.lookup(cmd, f); ok {
			if err := fv.set(f); err != nil {
				errs = append(errs, fv.where(cf.path)+": "+err.Error())
			}
			origins[f.Name] = origin{"file", fv.where(cf.path)}
			return
		}
		origins[f.Name] = origin{source: "default"}
	})
	if len(errs) > 0 {
		return nil, usagef("%s", strings.Join(errs, "\n"))
	}
	return origins, nil
}

// setFlag sets f to value through the flag's own Value.Set, as its
// command-line value, and marks it given: a list flag set again appends.
func setFlag(f *pflag.Flag, value string) error {
	if err := f.Value.Set(value); err != nil {
		return err
	}
	f.Changed = true
	return nil
}

// badValue says that the value from src does not parse as flag f's.
func badValue(src string, f *pflag.Flag, err error) string {
	want := map[string]string{
		"bool": "true or false", "duration": "a duration such as 30s or 1h", "float64": "a number",
		"int": "a whole number", "int32": "a whole number", "int64": "a whole number", "uint64": "a whole number, 0 or more",
	}[f.Value.Type()]
	if want == "" {
		want = "a " + f.Value.Type()
	}
	return fmt.Sprintf("%s: --%s wants %s: %v", src, f.Name, want, err)
}

// strayEnv returns, sorted, the ONCEQ_ variables of the environment that
// name no flag of any command under root (a typo, or a flag of another
// onceq version), each with the nearest variable that does, if one is near:
// they are ignored, and the caller warns of them.
func strayEnv(root *cobra.Command) [][2]string {
	known := map[string]bool{envName(configFlag): true}
	var names []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		commandFlags(c).VisitAll(func(f *pflag.Flag) {
			if configurable(f) && !known[envName(f.Name)] {
				known[envName(f.Name)] = true
				names = append(names, strings.TrimPrefix(envName(f.Name), envPrefix))
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	var stray [][2]string
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix) && value != "" && !known[name] {
			near := nearest(strings.TrimPrefix(name, envPrefix), names)
			if near != "" {
				near = envPrefix + near
			}
			stray = append(stray, [2]string{name, near})
		}
	}
	sort.Slice(stray, func(i, j int) bool { return stray[i][0] < stray[j][0] })
	return stray
}
