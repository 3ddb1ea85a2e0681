package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newConfigCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the configuration a command runs with",
	}
	cmd.AddCommand(newConfigPrintCmd(g))
	return cmd
}

func newConfigPrintCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "print [COMMAND...] [FLAGS]",
		Short: "Print a command's effective configuration, with where each value came from",
		Long: `Print the configuration that "onceq COMMAND FLAGS" would run with: every flag of
the command and the global flags, with its value and where it came from (flag,
env ONCEQ_<FLAG>, file and line, or default), as a config file (TOML). It
connects to nothing and runs nothing. Without a command it prints the global
flags.

Secrets are masked: the value of every flag whose name has the word password,
secret or token in it (--sasl-password), and the password of a URL
(http://user:PASSWORD@host) in any value. File paths, such as --tls-key, are
shown: they name a secret, they are not one. The --config line is a comment, as
a config file does not name another.`,
		Example: `  onceq config print worker --queue emails
  ONCEQ_CONFIG=onceq.toml onceq config print serve`,
		// The flags are those of the command to print, parsed below.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
				return cmd.Help()
			}
			target, rest, err := cmd.Root().Find(args)
			if err != nil {
				return usageError{err}
			}
			if target == cmd || target == cmd.Parent() {
				return usagef("onceq config print: name a command to print, or none for the global flags")
			}
			if err := commandFlags(target).Parse(rest); errors.Is(err, pflag.ErrHelp) {
				return cmd.Help()
			} else if err != nil {
				return usagef("onceq %s: %v", strings.Join(args[:len(args)-len(rest)], " "), err)
			}
			origins, err := applyConfig(target)
			if err != nil {
				return err
			}
			return printConfig(g.stdout, target, origins)
		},
	}
}

// printConfig writes cmd's effective configuration as a config file: the
// global flags at the top level, the command's in its table, each with its
// origin as a comment.
func printConfig(w io.Writer, cmd *cobra.Command, origins map[string]origin) error {
	root := cmd.Root()
	fmt.Fprintf(w, "# The configuration of %s: flag > env ONCEQ_<FLAG> > file > default.\n", cmd.CommandPath())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var own []*pflag.Flag
	commandFlags(cmd).VisitAll(func(f *pflag.Flag) {
		switch {
		case !configurable(f) || f.Hidden:
		case root.PersistentFlags().Lookup(f.Name) != f:
			own = append(own, f)
		case f.Name == configFlag:
			// A config file does not name another: a comment.
			fmt.Fprintf(tw, "# %s = %s\t# %s\n", f.Name, tomlValue(f), origins[f.Name])
		default:
			printFlag(tw, f, origins[f.Name])
		}
	})
	if cmd != root {
		fmt.Fprintf(tw, "\n[%s]\n", strings.Join(strings.Fields(cmd.CommandPath())[1:], "."))
		for _, f := range own {
			printFlag(tw, f, origins[f.Name])
		}
	}
	return tw.Flush()
}

// printFlag writes one "name = value  # origin" line.
func printFlag(w io.Writer, f *pflag.Flag, o origin) {
	note := o.String()
	if secretFlag(f.Name) && f.Value.String() != "" {
		note += ", masked"
	}
	fmt.Fprintf(w, "%s = %s\t# %s\n", f.Name, tomlValue(f), note)
}

// tomlValue writes f's value in TOML, masked: numbers and booleans bare,
// lists as arrays of strings, the rest (durations too) as strings.
func tomlValue(f *pflag.Flag) string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		items := sv.GetSlice()
		quoted := make([]string, len(items))
		for i, it := range items {
			quoted[i] = tomlString(masked(f.Name, it))
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	}
	s := f.Value.String()
	switch f.Value.Type() {
	case "bool", "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		return s
	case "float32", "float64":
		if !strings.ContainsAny(s, "IN") { // not Inf or NaN, which TOML spells otherwise
			return s
		}
	}
	return tomlString(masked(f.Name, s))
}

// tomlString quotes s as a TOML basic string, whose escapes are JSON's.
func tomlString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// urlPassword matches the password of a URL's user info.
var urlPassword = regexp.MustCompile(`(://[^/?#@:\s]*:)[^/?#@\s]*@`)

// masked returns the value of flag name as it may be shown: "********" for
// a secret flag's, any URL's password replaced so in the others.
func masked(name, value string) string {
	if secretFlag(name) && value != "" {
		return "********"
	}
	return urlPassword.ReplaceAllString(value, "${1}********@")
}

// secretFlag reports whether the flag's value is a secret: a word of its
// name is password, passwd, secret or token, and the flag does not name a
// file or directory (--tls-key names one: a path is no secret).
func secretFlag(name string) bool {
	words := strings.Split(name, "-")
	switch words[len(words)-1] {
	case "file", "dir", "path":
		return false
	}
	for _, w := range words {
		switch w {
		case "password", "passwd", "secret", "token":
			return true
		}
	}
	return false
}
