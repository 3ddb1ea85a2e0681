package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// allCommands returns every command of the CLI, the root first.
func allCommands(c *cobra.Command) []*cobra.Command {
	cmds := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		cmds = append(cmds, allCommands(sub)...)
	}
	return cmds
}

// findCommand returns the command at path ("onceq periodic run") of root.
func findCommand(t *testing.T, root *cobra.Command, path string) *cobra.Command {
	t.Helper()
	c, _, err := root.Find(strings.Fields(path)[1:])
	if err != nil || c.CommandPath() != path {
		t.Fatalf("no command %q: %v", path, err)
	}
	return c
}

// testValue is a value of f's type, other than its default, as the
// command line writes it.
func testValue(t *testing.T, f *pflag.Flag) string {
	switch typ := f.Value.Type(); typ {
	case "bool":
		if f.DefValue == "true" {
			return "false"
		}
		return "true"
	case "int", "int32", "int64", "uint64":
		if f.DefValue == "7" {
			return "8"
		}
		return "7"
	case "float64":
		return "0.25"
	case "duration":
		return "17s"
	case "string", "stringSlice", "stringArray":
		return "v-" + f.Name
	default:
		t.Fatalf("--%s is a %s: give the test a value of that type", f.Name, typ)
		return ""
	}
}

// wantValue is what the command line makes of f given values, as
// Value.String() shows it: the test's reference for the other sources.
func wantValue(t *testing.T, path, name string, values ...string) string {
	t.Helper()
	c := findCommand(t, newRootCmd(&globals{}), path)
	args := make([]string, len(values))
	for i, v := range values {
		args[i] = "--" + name + "=" + v
	}
	if err := commandFlags(c).Parse(args); err != nil {
		t.Fatalf("%s %s: %v", path, strings.Join(args, " "), err)
	}
	return commandFlags(c).Lookup(name).Value.String()
}

// TestEveryFlagReadsEnvAndFile walks every command and every flag, hidden
// ones too, and sets each through its environment variable, then through
// its key in the command's table of a config file: each must end up with
// the value the command line would give it. A flag added to any command
// is covered without a change here.
func TestEveryFlagReadsEnvAndFile(t *testing.T) {
	clearEnv(t)
	var flags int
	for _, c := range allCommands(newRootCmd(&globals{})) {
		path := c.CommandPath()
		t.Run(strings.ReplaceAll(path, " ", "_"), func(t *testing.T) {
			type check struct {
				name string
				env  bool // also from the environment
				want string
			}
			var checks []check
			var file strings.Builder
			if path != "onceq" {
				file.WriteString("[" + strings.Join(strings.Fields(path)[1:], ".") + "]\n")
			}
			fileFlag := c.Root().PersistentFlags().Lookup(configFlag)
			commandFlags(c).VisitAll(func(f *pflag.Flag) {
				if f.Name == "help" || f == fileFlag {
					return // cobra's; the file itself (TestConfigPrecedence)
				}
				v := testValue(t, f)
				want := wantValue(t, path, f.Name, v)
				if want == f.DefValue {
					t.Fatalf("--%s: the test's value %q is the default", f.Name, v)
				}
				// ONCEQ_CONFIG names the file, not topics create's --config.
				env := f.Name != configFlag
				if env {
					t.Setenv(envName(f.Name), v)
				}
				file.WriteString(f.Name + " = " + tomlString(v) + "\n")
				checks = append(checks, check{f.Name, env, want})
			})
			flags += len(checks)

			root := newRootCmd(&globals{})
			origins, err := applyConfig(findCommand(t, root, path))
			if err != nil {
				t.Fatal(err)
			}
			fl := commandFlags(findCommand(t, root, path))
			for _, ch := range checks {
				if !ch.env {
					continue
				}
				if got := fl.Lookup(ch.name).Value.String(); got != ch.want || origins[ch.name].source != "env" {
					t.Errorf("%s=...: --%s is %q from %v, want %q from env", envName(ch.name), ch.name, got, origins[ch.name], ch.want)
				}
			}

			for _, ch := range checks {
				os.Unsetenv(envName(ch.name)) // t.Setenv restores them
			}
			cfg := filepath.Join(t.TempDir(), "onceq.toml")
			if err := os.WriteFile(cfg, []byte(file.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv(envName(configFlag), cfg)
			root = newRootCmd(&globals{})
			if origins, err = applyConfig(findCommand(t, root, path)); err != nil {
				t.Fatalf("%v\n%s", err, file.String())
			}
			fl = commandFlags(findCommand(t, root, path))
			for _, ch := range checks {
				if got := fl.Lookup(ch.name).Value.String(); got != ch.want || origins[ch.name].source != "file" {
					t.Errorf("%s: --%s is %q from %v, want %q from the file", cfg, ch.name, got, origins[ch.name], ch.want)
				}
			}
		})
	}
	if flags < 150 {
		t.Fatalf("checked %d flags: the walk missed commands", flags)
	}
}

// TestListFlagsTakeLists: a repeated flag takes a TOML array, item by item
// as repeated flags, and a comma list from the environment.
func TestListFlagsTakeLists(t *testing.T) {
	clearEnv(t)
	cfg := writeConfig(t, "[worker]\nqueue = [\"emails\", \"sms\"]\n[topics.create]\nconfig = [\"retention.ms=1000\", \"segment.ms=2000\"]\n")
	for _, tc := range []struct{ path, flag, want string }{
		{"onceq worker", "queue", wantValue(t, "onceq worker", "queue", "emails", "sms")},
		{"onceq topics create", "config", wantValue(t, "onceq topics create", "config", "retention.ms=1000", "segment.ms=2000")},
	} {
		t.Setenv(envName(configFlag), cfg)
		c := findCommand(t, newRootCmd(&globals{}), tc.path)
		if _, err := applyConfig(c); err != nil {
			t.Fatal(err)
		}
		if got := c.Flag(tc.flag).Value.String(); got != tc.want {
			t.Errorf("%s --%s from the file: %s, want %s", tc.path, tc.flag, got, tc.want)
		}
	}
	t.Setenv("ONCEQ_QUEUE", "a,b")
	c := findCommand(t, newRootCmd(&globals{}), "onceq worker")
	if _, err := applyConfig(c); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Flag("queue").Value.String(), wantValue(t, "onceq worker", "queue", "a,b"); got != want {
		t.Errorf("ONCEQ_QUEUE=a,b: --queue %s, want %s", got, want)
	}
}

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "onceq.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clearEnv unsets, for the test, the ONCEQ_ variables of the environment
// it runs in.
func clearEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, envPrefix) {
			t.Setenv(name, "") // empty counts as unset
		}
	}
}
